"""Errors carry structure (the options they name, by keyword; the value, column or file),
and the reader picks the spelling: Python keywords (``eps=1e-8``) by default, the command
line's flags (``--eps 1e-8``) through the CLI's one table (:func:`grpo_cli.cli.params.flags`,
read from the declared options).
No message is rewritten: the core writes no flag."""

from __future__ import annotations

import ast
import itertools
import pickle
import re
from pathlib import Path

import polars as pl
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from grpo_cli import AdvantageOptions, compute_advantages, run_job
from grpo_cli.cli import app
from grpo_cli.cli.params import Flags, flag_spelling, flags
from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.errors import (
    GrpoAdvError,
    OptionsError,
    OutputError,
    Verbatim,
    join,
    keyword_spelling,
    option,
)
from grpo_cli.core.estimators import get_estimator
from tests.conftest import ROOT

PACKAGE = ROOT / "grpo_cli"
# Our flags are kebab-case words; OpenRLHF's snake_case flags that preset sources cite
# (``--advantage_estimator rloo``) are another program's and do not match.
FLAG_TEXT = re.compile(r"--[a-z][a-z-]*(?![\w])")
# Not yet converted: the registries' one-line summaries, which only ``--help`` and the
# README show (an engine's names its alias flag).
HELP_SUMMARIES = (
    ("core/engine_options.py", "logs larger than memory (alias --low-memory)"),
    ("core/engine_options.py", "torch segment operations"),
    ("core/engine_options.py", "a Ray cluster (--ray-address"),
    ("core/estimators.py", "r - b, b the reward of a greedy response (--baseline-col)"),
)


def core_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    # an attribute's docstring: a string statement right after an assignment
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for before, after in itertools.pairwise(body):
                if (
                    isinstance(before, ast.Assign | ast.AnnAssign)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                ):
                    found.add(id(after.value))
    return found


def _option_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "option"
    ]


class TestOneErrorTwoSpellings:
    def test_a_number_and_its_example(self) -> None:
        with pytest.raises(OptionsError) as raised:
            AdvantageOptions(eps=-1.0)
        error = raised.value
        assert str(error) == error.message == "eps must be a finite number >= 0, got -1.0"
        assert error.hint == "e.g. eps=1e-8"
        assert error.render(flag_spelling) == (
            "--eps must be a finite number >= 0, got -1.0",
            "e.g. --eps 1e-8",
        )
        assert (error.options, error.value) == (("eps",), -1.0)

    def test_a_tuple_each_side_as_it_takes_it(self) -> None:
        with pytest.raises(OptionsError) as raised:
            AdvantageOptions(clip=(1.0, 0.0))
        assert raised.value.render(keyword_spelling) == (
            "clip needs LO,HI with LO < HI, got (1.0, 0.0)",
            "e.g. clip=(-10, 10)",
        )
        assert raised.value.render(flag_spelling) == (
            "--clip needs LO,HI with LO < HI, got (1.0, 0.0)",
            "e.g. --clip -10,10",
        )

    def test_a_placeholder_of_a_repeated_option(self) -> None:
        with pytest.raises(OptionsError) as raised:
            AdvantageOptions(group_cols=())
        assert raised.value.hint == 'pass group_cols=("COL",) (e.g. prompt_id)'
        assert raised.value.render(flag_spelling)[1] == "pass --group-col COL (e.g. prompt_id)"

    def test_a_repeated_option_with_its_short_flag(self) -> None:
        with pytest.raises(OptionsError) as raised:
            AdvantageOptions(reward_cols=("a", "b", "c"), reward_weights=(1.0,))
        assert (
            raised.value.hint
            == 'give one weight per reward column, or name the rewards: reward_cols=("a",)'
        )
        assert raised.value.render(flag_spelling)[1] == (
            "give one weight per reward column, or name the rewards: -r a"
        )

    def test_a_choice_is_quoted_in_python_only(self) -> None:
        with pytest.raises(OptionsError) as raised:
            options = AdvantageOptions(aggregation="normalize_then_sum", estimator="gpg")
            options.check_estimator_needs(get_estimator("gpg"))
        assert raised.value.message == (
            'aggregation="normalize_then_sum" normalises each reward within its group, which '
            "estimator gpg does not"
        )
        assert raised.value.render(flag_spelling)[0] == (
            "--aggregation normalize_then_sum normalises each reward within its group, which "
            "estimator gpg does not"
        )

    def test_an_alias_flag_on_the_command_line_only(self) -> None:
        alone = option("backend", "partitioned", alias="alone")
        explained = option("backend", "partitioned", alias="explained")
        assert keyword_spelling(alone) == keyword_spelling(explained) == 'backend="partitioned"'
        assert flag_spelling(alone) == "--low-memory"
        assert flag_spelling(explained) == "--low-memory (--backend partitioned)"
        assert flag_spelling(option("backend", "ray", alias="explained")) == "--backend ray"

    def test_a_flag_without_value_and_a_bool(self) -> None:
        text = "pass " + option("force", True) + " or " + option("output", short=True)
        assert str(text) == "pass force=True or output"
        assert text.render(flag_spelling) == "pass --force or -o"
        listed = join(", ", [option("group"), option("row", Verbatim("N")), "x"])
        assert str(listed) == "group, row=N, x"
        assert listed.render(flag_spelling) == "--group, --row N, x"

    def test_pickled_with_its_structure(self) -> None:
        with pytest.raises(OptionsError) as raised:
            AdvantageOptions(eps=-1.0)
        again = pickle.loads(pickle.dumps(raised.value))
        assert type(again) is OptionsError and again.value == -1.0
        assert again.render(flag_spelling) == raised.value.render(flag_spelling)
        assert again.args == (again.message,)


class TestTheLibraryAndTheCommandLine:
    def test_run_job_names_its_keywords(self, tmp_path: Path) -> None:
        source, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]}).write_parquet(source)
        out.write_text("mine")
        with pytest.raises(OutputError) as raised:
            run_job([source], out)
        error = raised.value
        assert (error.message, error.hint) == (
            f"{out} already exists",
            "pass force=True to overwrite it, or choose another output",
        )
        assert error.path == str(out) and error.options == ("force", "output")
        result = CliRunner().invoke(app, ["compute", str(source), "-o", str(out)])
        assert result.exit_code == 4
        assert result.stderr == (
            f"error: {out} already exists\n"
            "hint: pass --force to overwrite it, or choose another -o\n"
        )

    def test_the_same_error_from_python_and_from_the_command_line(self, tmp_path: Path) -> None:
        frame = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]})
        source = tmp_path / "in.csv"
        frame.write_csv(source)
        with pytest.raises(OptionsError) as raised:
            compute_advantages(frame, group_size=0)
        assert (raised.value.message, raised.value.hint) == (
            "group_size must be at least 1, got 0",
            "the number of responses sampled per prompt (num_generations)",
        )
        result = CliRunner().invoke(app, ["compute", str(source), "--group-size", "0", "-o", "-"])
        assert result.exit_code == 2
        assert result.stderr == (
            "error: --group-size must be at least 1, got 0\n"
            "hint: the number of responses sampled per prompt (num_generations)\n"
        )

    def test_engine_settings_are_their_own_options(self) -> None:
        frame = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]})
        with pytest.raises(OptionsError) as raised:
            compute_advantages(frame, ray_address="auto")
        assert (raised.value.message, raised.value.hint) == (
            'ray_address is where backend="ray" runs',
            'add backend="ray", or drop it',
        )
        assert raised.value.render(flag_spelling) == (
            "--ray-address is where --backend ray runs",
            "add --backend ray, or drop it",
        )
        assert EngineOptions(backend="TORCH").backend == "torch"
        assert "backend" not in {f for f in AdvantageOptions.__dataclass_fields__}
        with pytest.raises(OptionsError, match="unknown engine setting"):
            EngineOptions.of({"eps": 1.0})


class TestTheCoreWritesNoFlag:
    def test_no_flag_in_any_core_string(self) -> None:
        found = []
        for path in core_modules():
            tree = ast.parse(path.read_text())
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and FLAG_TEXT.search(node.value)
                ):
                    found.append((str(path.relative_to(PACKAGE)), node.value))
        allowed = [
            (where, text)
            for where, text in found
            if any(where == w and text.startswith(t) for w, t in HELP_SUMMARIES)
        ]
        assert len(allowed) == len(HELP_SUMMARIES)
        assert [hit for hit in found if hit not in allowed] == []

    def test_options_knows_no_engine(self) -> None:
        tree = ast.parse((PACKAGE / "core" / "options.py").read_text())
        imported = [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ] + [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        ]
        assert not [name for name in imported if name.startswith("grpo_cli.engines")]

    def test_every_option_a_message_names_has_a_flag(self) -> None:
        named: dict[str, str] = {}
        for path in core_modules():
            for call in _option_calls(ast.parse(path.read_text())):
                first = call.args[0] if call.args else None
                where = f"{path.relative_to(ROOT)}:{call.lineno}"
                if isinstance(first, ast.Attribute) and first.attr == "keyword":
                    continue  # another reference's keyword, itself checked here
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{where}: name the option by a literal keyword"
                )
                named[first.value] = where
        assert len(named) > 30
        assert {k: w for k, w in named.items() if k not in flags()} == {}

    def test_the_table_is_the_commands_own_flags(self) -> None:
        """Read from the declarations, each keyword's flags are what Click parses (long,
        then short; a --x/--no-x flag by its first name), and a keyword is repeated where
        the option takes one value per flag."""
        commands = get_command(app).commands  # type: ignore[attr-defined]
        assert len(commands) == 7
        parsed = {}
        for command in commands.values():
            for param in command.params:
                if param.param_type_name == "option" and param.name not in parsed:
                    parsed[param.name] = (tuple(param.opts), param.multiple)
        keywords = {"group_col": "group_cols", "reward_col": "reward_cols"}
        assert {keywords.get(k, k): v for k, v in parsed.items()} == {
            k: (f.names, f.repeated) for k, f in flags().items()
        }
        assert flags()["group_cols"] == Flags(("--group-col", "-g"), repeated=True)
        assert flags()["token_weighted"].names == ("--token-weighted",)
        assert flags()["summary_path"].names == ("--summary",)


def test_no_rewriting_left() -> None:
    text = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    for gone in ("python_spelling", "FLAG_SPELLING", "speaks_python"):
        assert gone not in text


def test_jobs_and_engines_take_no_spelling() -> None:
    """The spelling of options is the reader's: no module of jobs/ or engines/ takes,
    keeps or applies one (their callbacks and results carry messages)."""
    for path in [*(PACKAGE / "jobs").glob("*.py"), *(PACKAGE / "engines").glob("*.py")]:
        tree = ast.parse(path.read_text())
        names = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert names & {"spell", "Spelling", "keyword_spelling", "render"} == set(), path


def test_a_core_error_is_no_error_of_the_cli() -> None:
    # GrpoAdvError keeps message and hint as text with options, not as flags
    error = GrpoAdvError("x " + option("eps"), hint=option("eps", Verbatim("1e-8")))
    assert error.text.parts[1] == option("eps")
    assert (error.message, error.hint) == ("x eps", "eps=1e-8")

"""`explain` finds the group for the user: a key prefix, ``--row N``, ``--pick``, composite
keys given one ``--group`` per column, and the table's input rows, steps and texts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.explain import PICK_HELP
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.explain import PICKS, TEXT_WIDTH, explain_one
from grpo_cli.report.explain_context import signed_sum
from tests.conftest import SAMPLE_DIR, SAMPLE_FILES, cli_error, cli_text, make_log

LONG = "The answer is 42 because six times seven is forty-two, as everyone knows."
# Groups by prompt_id, in input order of their first rows: alpha (rows 0, 2), beta (1, 3:
# equal rewards), gamma (4, 5, 9: the largest |advantage|, at row 9), delta (6, 7: one valid
# reward of two), alphabet (8: one response).
LOG = pl.DataFrame(
    {
        "step": [1, 1, 1, 1, 2, 2, 2, 2, 3, 3],
        "prompt_id": [
            "alpha",
            "beta",
            "alpha",
            "beta",
            "gamma",
            "gamma",
            "delta",
            "delta",
            "alphabet",
            "gamma",
        ],
        "completion": [f"answer {i}" for i in range(9)] + [LONG],
        "reward": [1.0, 0.5, 0.0, 0.5, 0.0, 0.0, None, 2.0, 0.25, 3.0],
    }
)


# LOG's groups are by prompt: gamma spans steps 2 and 3 on purpose (an explicit -g pools)
BY_PROMPT = {"group_cols": ("prompt_id",)}
POOLED = ("-g", "prompt_id")


@pytest.fixture
def log_csv(tmp_path: Path) -> Path:
    path = tmp_path / "log.csv"
    LOG.write_csv(path)
    return path


def lines(output: str) -> list[str]:
    return output.strip().splitlines()


def table(output: str) -> list[dict[str, str]]:
    """The explanation table (one part, one line per row) as header -> cell."""
    head: list[str] = []
    rows = []
    for line in output.splitlines():
        if line.startswith("┃"):
            head = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│") and head:
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows.append(dict(zip(head, cells, strict=True)))
    return rows


class TestPrefix:
    def test_a_unique_prefix_finds_the_group(self, runner: CliRunner, log_csv: Path) -> None:
        explanation = explain_one(LOG, None, BY_PROMPT, "gam")
        assert explanation.key == {"prompt_id": "gamma"}
        assert [r.reward for r in explanation.rows] == [0.0, 0.0, 3.0]
        assert (
            cli_text(explanation.chosen)
            == "--group 'gam': the only group whose key starts that way"
        )
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--group", "alphab"])
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[:2] == [
            "group prompt_id=alphabet: 1 response",
            "  --group 'alphab': the only group whose key starts that way",
        ]

    def test_an_exact_key_wins_over_longer_keys(self) -> None:
        explanation = explain_one(LOG, None, BY_PROMPT, "alpha")  # also the start of "alphabet"
        assert explanation.key == {"prompt_id": "alpha"}
        assert [r.reward for r in explanation.rows] == [1.0, 0.0]
        assert explanation.chosen is None

    def test_an_ambiguous_prefix_lists_the_candidates(
        self, runner: CliRunner, log_csv: Path
    ) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--group", "alph"])
        assert result.exit_code == 3
        assert lines(result.output) == [
            "error: --group 'alph' is the start of 2 groups' keys: alpha, alphabet",
            "hint: give more of the key, so that it starts one group's key only (or all of it)",
        ]

    def test_at_most_five_candidates(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["explain", str(SAMPLE_FILES["csv"]), "--group", "p0"])
        assert result.exit_code == 3
        assert lines(result.output)[0] == (
            "error: --group 'p0' is the start of 64 groups' keys: "
            "p015, p013, p007, p008, p001 (and 59 more)"
        )
        assert "Traceback" not in result.output

    def test_a_composite_prefix(self) -> None:
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        explicit = {"group_cols": ("step", "prompt_id")}
        with pytest.raises(InputError) as info:
            explain_one(frame, None, explicit, "1,p01")
        assert cli_error(info.value)[0] == (
            "--group '1,p01' is the start of 6 groups' keys: "
            "1,p015; 1,p013; 1,p014; 1,p010; 1,p012 (and 1 more)"
        )
        assert explain_one(frame, None, explicit, "1,p015").key == {"step": 1, "prompt_id": "p015"}

    def test_no_match_is_the_existing_error(self, runner: CliRunner, log_csv: Path) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--group", "zeta"])
        assert result.exit_code == 3
        assert lines(result.output) == [
            "error: no group 'zeta' in prompt_id",
            "hint: existing keys: alpha, beta, gamma, delta, alphabet",
        ]


class TestRow:
    @pytest.mark.parametrize(
        ("row", "key", "rows"),
        [(0, "alpha", ["0", "2"]), (9, "gamma", ["4", "5", "9"]), (7, "delta", ["6", "7"])],
    )
    def test_the_group_of_a_row(
        self, runner: CliRunner, log_csv: Path, row: int, key: str, rows: list[str]
    ) -> None:
        assert explain_one(LOG, None, BY_PROMPT, row=row).key == {"prompt_id": key}
        result = runner.invoke(
            app, ["explain", str(log_csv), *POOLED, "--row", str(row)], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[:2] == [
            f"group prompt_id={key}: {len(rows)} responses",
            f"  --row {row}: the group of input row {row}",
        ]
        assert [r["row"] for r in table(result.stdout)] == rows

    def test_past_the_end(self, runner: CliRunner, log_csv: Path) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--row", "10"])
        assert result.exit_code == 3
        assert lines(result.output) == [
            "error: --row 10 is past the end of the log: it has 10 rows",
            "hint: rows are numbered from 0 to 9, in the order read",
        ]

    def test_negative(self, runner: CliRunner, log_csv: Path) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--row", "-1"])
        assert result.exit_code == 2
        assert lines(result.output)[0] == (
            "error: --row -1 is not a row number: rows are numbered from 0"
        )

    def test_rows_count_on_across_inputs(self, runner: CliRunner, tmp_path: Path) -> None:
        folder = tmp_path / "steps"
        folder.mkdir()
        LOG.head(4).write_csv(folder / "a.csv")
        LOG.tail(6).write_csv(folder / "b.csv")
        result = runner.invoke(
            app, ["explain", str(folder), *POOLED, "--row", "9"], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[0] == "group prompt_id=gamma: 3 responses"
        assert [r["row"] for r in table(result.stdout)] == ["4", "5", "9"]

    def test_positional_groups(self, runner: CliRunner) -> None:
        args = ["explain", str(SAMPLE_DIR / "trl_completions"), "--preset", "trl"]
        result = runner.invoke(app, [*args, "--group-size", "4", "--row", "5"])
        assert result.exit_code == 0, result.output
        assert lines(result.output)[0] == "group step=10, group_index=1: 4 responses"


class TestPick:
    def test_worst(self, runner: CliRunner, log_csv: Path) -> None:
        advantages = annotate(LOG, group_cols=("prompt_id",)).frame["advantage"].abs()
        assert advantages.arg_max() == 9  # gamma's 3.0
        explanation = explain_one(LOG, None, BY_PROMPT, pick="worst")
        assert explanation.key == {"prompt_id": "gamma"}
        assert cli_text(explanation.chosen) == (
            "--pick worst: input row 9 has the largest |advantage| of the log (1.1547)"
        )
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--pick", "worst"])
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[0] == "group prompt_id=gamma: 3 responses"

    def test_worst_on_the_sample(self) -> None:
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        computed = annotate(frame).frame
        at = computed["advantage"].abs().arg_max()
        assert at is not None
        explanation = explain_one(frame, None, {}, pick="worst")
        # the sample has a step column: groups are (step, prompt_id) by default
        assert explanation.key == {
            "step": computed["step"][at],
            "prompt_id": computed["prompt_id"][at],
        }
        assert max(abs(r.advantage or 0.0) for r in explanation.rows) == pytest.approx(
            computed["advantage"].abs().max()
        )

    def test_zero_variance(self, runner: CliRunner, log_csv: Path) -> None:
        explanation = explain_one(LOG, None, BY_PROMPT, pick="zero-variance")
        assert explanation.key == {"prompt_id": "beta"}
        assert [r.advantage for r in explanation.rows] == [0.0, 0.0]
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, "--pick", "zero-variance"])
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[:2] == [
            "group prompt_id=beta: 2 responses",
            "  --pick zero-variance: the first group whose valid rewards (two or more) are equal",
        ]

    def test_singleton_is_one_valid_reward(self) -> None:
        """delta has two responses, one with a null reward: the singleton policy applies."""
        explanation = explain_one(LOG, None, BY_PROMPT, pick="singleton")
        assert explanation.key == {"prompt_id": "delta"}
        assert explanation.n == 1 and explanation.size == 2
        alone = explain_one(
            LOG.filter(pl.col("prompt_id") != "delta"), None, BY_PROMPT, pick="singleton"
        )
        assert alone.key == {"prompt_id": "alphabet"}

    @pytest.mark.parametrize(
        ("pick", "missing"),
        [
            ("singleton", "no group has exactly one valid reward"),
            ("zero-variance", "no group has two or more valid rewards, all equal"),
        ],
    )
    def test_none_found(self, runner: CliRunner, tmp_path: Path, pick: str, missing: str) -> None:
        path = tmp_path / "plain.csv"
        make_log({"a": [1.0, 0.0], "b": [0.0, 1.0, None]}).write_csv(path)
        result = runner.invoke(app, ["explain", str(path), "--pick", pick])
        assert result.exit_code == 3
        others = ", ".join(p for p in PICKS if p != pick)
        assert lines(result.output) == [
            f"error: --pick {pick} finds no group: {missing}",
            f"hint: pick another ({others}), or give --group KEY or --row N",
        ]

    def test_worst_without_any_advantage(self) -> None:
        with pytest.raises(InputError) as info:
            explain_one(make_log({"a": [None, None]}), None, {}, pick="worst")
        assert cli_error(info.value)[0] == (
            "--pick worst finds no advantage: every advantage of the log is null"
        )

    def test_the_help_names_every_pick(self) -> None:
        assert tuple(PICK_HELP) == PICKS


class TestExactlyOne:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            ([], "error: explain needs a group: give --group KEY, --row N or --pick WHICH"),
            (
                ["--group", "alpha", "--pick", "worst"],
                "error: --group and --pick both choose the group: give only one of --group, "
                "--row, --pick",
            ),
            (
                ["--row", "0", "--pick", "singleton"],
                "error: --row and --pick both choose the group: give only one of --group, "
                "--row, --pick",
            ),
            (
                ["--group", "alpha", "--row", "0", "--pick", "worst"],
                "error: --group and --row and --pick both choose the group: give only one of "
                "--group, --row, --pick",
            ),
            (["--pick", "best"], "error: unknown --pick 'best'"),
        ],
    )
    def test_usage_errors(
        self, runner: CliRunner, log_csv: Path, args: list[str], message: str
    ) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), *POOLED, *args])
        assert result.exit_code == 2
        assert lines(result.output)[0] == message
        assert len(lines(result.output)) == 2 and lines(result.output)[1].startswith("hint: ")

    def test_before_the_input_is_read(self, runner: CliRunner, tmp_path: Path) -> None:
        result = runner.invoke(app, ["explain", str(tmp_path / "missing.csv")])
        assert result.exit_code == 2
        assert "explain needs a group" in result.output

    def test_from_python(self) -> None:
        with pytest.raises(OptionsError, match="explain needs a group"):
            explain_one(LOG, None, BY_PROMPT)


COMMAS = pl.DataFrame(
    {
        "step": [1, 1, 2, 2, 1],
        "prompt": ["a, b", "a, b", "a, b", "c", "a, b"],
        "reward": [1.0, 0.0, 1.0, 0.5, 0.5],
    }
)
COMPOSITE = {"group_cols": ("step", "prompt")}


class TestCompositeKeys:
    @pytest.mark.parametrize(
        "given",
        [
            ["step=1", "prompt=a, b"],
            ["prompt=a, b", "step=1"],
            ["1", "a, b"],
        ],
        ids=["named", "any-order", "bare"],
    )
    def test_values_with_commas(self, given: list[str]) -> None:
        explanation = explain_one(COMMAS, None, COMPOSITE, given)
        assert explanation.key == {"step": 1, "prompt": "a, b"}
        assert [r.reward for r in explanation.rows] == [1.0, 0.0, 0.5]
        assert [r.row for r in explanation.rows] == [0, 1, 4]

    def test_repeated_on_the_command_line(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "commas.csv"
        COMMAS.write_csv(path)
        args = ["explain", str(path), "-g", "step", "-g", "prompt"]
        result = runner.invoke(app, [*args, "--group", "step=2", "--group", "prompt=a, b"])
        assert result.exit_code == 0, result.output
        assert lines(result.stdout)[0] == "group step=2, prompt=a, b: 1 response"
        old = runner.invoke(app, [*args, "--group", "2,c"])  # the comma form still works
        assert old.exit_code == 0, old.output
        assert lines(old.stdout)[0] == "group step=2, prompt=c: 1 response"

    def test_the_comma_form_cannot_hold_commas(self) -> None:
        with pytest.raises(InputError) as info:
            explain_one(COMMAS, None, COMPOSITE, "1,a, b")
        assert (
            cli_error(info.value)[0]
            == "--group '1,a, b' gives 3 values for 2 key columns (step, prompt)"
        )
        assert info.value.hint is not None
        assert (cli_error(info.value)[1] or "").startswith(
            "give one value per column, comma-separated: STEP,PROMPT; values with commas: "
            "--group step=... --group prompt=...; existing keys: 1,a, b; 2,a, b; 2,c"
        )

    @pytest.mark.parametrize(
        ("given", "message"),
        [
            (["step=1", "a, b"], "--group 'step=1', 'a, b' mixes COL=VALUE and bare values"),
            (["prompt=c"], "--group 'prompt=c' gives no value for step"),
            (["step=1", "step=2"], "--group gives step twice"),
            (
                ["1", "a, b", "x"],
                "--group '1', 'a, b', 'x' gives 3 values for 2 key columns (step, prompt)",
            ),
        ],
    )
    def test_mistakes(self, given: list[str], message: str) -> None:
        with pytest.raises(InputError) as info:
            explain_one(COMMAS, None, COMPOSITE, given)
        assert cli_error(info.value)[0] == message

    def test_one_key_column_by_name(self) -> None:
        assert explain_one(LOG, None, BY_PROMPT, "prompt_id=beta").key == {"prompt_id": "beta"}
        # a value that starts with the column's name and "=": named twice
        frame = make_log({"prompt_id=x": [1.0, 0.0], "x": [0.0, 0.0]})
        assert explain_one(frame, None, {}, "prompt_id=prompt_id=x").key == {
            "prompt_id": "prompt_id=x"
        }

    def test_values_are_matched_as_text(self) -> None:
        frame = pl.DataFrame({"run": [7, 7, 8], "reward": [1.0, 0.0, 1.0]})
        assert explain_one(frame, None, {"group_cols": ("run",)}, "run=7").key == {"run": 7}


class TestTable:
    def test_rows_steps_and_texts(self, runner: CliRunner, log_csv: Path) -> None:
        result = runner.invoke(
            app, ["explain", str(log_csv), *POOLED, "--group", "gamma"], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        rows = table(result.output)
        assert list(rows[0]) == [
            "row",
            "step",
            "reward",
            "with the numbers",
            "advantage",
            "completion",
        ]
        assert [r["row"] for r in rows] == ["4", "5", "9"]
        assert [r["step"] for r in rows] == ["2", "2", "3"]
        assert [r["completion"] for r in rows] == ["answer 4", "answer 5", f"{LONG[:40]}…"]
        assert [r["advantage"] for r in rows] == ["-0.57735", "-0.57735", "1.1547"]

    def test_the_cut(self) -> None:
        explanation = explain_one(LOG, None, BY_PROMPT, "gamma")
        assert explanation.text_col == "completion" and explanation.step_col == "step"
        assert explanation.rows[2].text == LONG[:TEXT_WIDTH] + "…"
        assert [r.step for r in explanation.rows] == [2, 2, 3]
        multiline = LOG.with_columns(completion=pl.lit("first line\n\tsecond  line"))
        assert (
            explain_one(multiline, None, BY_PROMPT, "gamma").rows[0].text
            == "first line second line"
        )

    def test_a_step_in_the_key_is_not_repeated(self, runner: CliRunner, log_csv: Path) -> None:
        args = ["explain", str(log_csv), "-g", "step", "-g", "prompt_id", "--group", "2,gamma"]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        rows = table(result.output)
        assert "step" not in rows[0]
        assert [r["row"] for r in rows] == ["4", "5"]

    @pytest.mark.usefixtures("width_80")
    def test_without_step_or_text(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "plain.csv"
        make_log({"a": [1.0, 0.0], "b": [0.0, 1.0]}).write_csv(path)
        result = runner.invoke(app, ["explain", str(path), "--group", "b"])
        assert result.exit_code == 0, result.output
        rows = table(result.output)
        assert list(rows[0]) == ["row", "reward", "with the numbers", "advantage"]
        assert [r["row"] for r in rows] == ["2", "3"]

    @pytest.mark.parametrize("width", [40, 60, 80])
    def test_narrow_terminals(self, runner: CliRunner, log_csv: Path, width: int) -> None:
        result = runner.invoke(
            app, ["explain", str(log_csv), *POOLED, "--pick", "worst"], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        boxed = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
        assert boxed and all(cell_len(line) <= width for line in boxed)
        words = result.stdout.split()
        assert {"4", "5", "9", "1.1547", "-0.57735"} <= set(words)


class TestSignedSums:
    def test_no_plus_before_a_negative_number(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "negative.csv"
        make_log({"g": [0.5, -1.24591, 2.0]}).write_csv(path)
        result = runner.invoke(app, ["explain", str(path), "--group", "g"])
        assert result.exit_code == 0, result.output
        assert "  mean = (0.5 - 1.24591 + 2) / 3 = 0.41803" in lines(result.output)
        assert "+ -" not in result.output

    def test_signed_sum(self) -> None:
        assert signed_sum([0.5, -1.24591]) == "0.5 - 1.24591"
        assert signed_sum([-1.0, 2.0, -0.0, 0.0]) == "-1 + 2 - 0 + 0"
        assert signed_sum([3.0]) == "3"


class TestStepLedKeys:
    """Groups form within steps by default: ``--group PROMPT`` still finds a prompt's
    group when one step has it, and lists the steps when several do."""

    def test_one_step_has_the_prompt(self) -> None:
        explanation = explain_one(LOG, None, {}, "delta")
        assert explanation.key == {"step": 2, "prompt_id": "delta"}

    def test_several_steps_are_listed(self, runner: CliRunner, log_csv: Path) -> None:
        result = runner.invoke(app, ["explain", str(log_csv), "--group", "gamma"])
        assert result.exit_code == 3
        assert lines(result.output)[:2] == [
            "error: --group 'gamma' is a group in 2 values of step: 2,gamma; 3,gamma",
            "hint: give the step too, e.g. --group 2,gamma",
        ]
        named = runner.invoke(app, ["explain", str(log_csv), "--group", "3,gamma"])
        assert named.exit_code == 0, named.output
        assert lines(named.output)[0] == "group step=3, prompt_id=gamma: 1 response"

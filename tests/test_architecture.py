"""The house: five layers in their folders, each importing only the ones below it, with no
import circle (lazy and type-only imports included); one plan made once, estimator and
engine registries that carry their facts, policies applied once."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from grpo_cli import compute_advantages
from grpo_cli.core.engine_options import BACKENDS, ENGINES
from grpo_cli.core.errors import OptionsError
from grpo_cli.core.estimators import ESTIMATORS, register_estimator
from grpo_cli.core.plan import Keys
from grpo_cli.engines import get_engine
from grpo_cli.report.explain import explain_one
from tests.conftest import ROOT, make_log
from tests.test_presets import hostile_log

PACKAGE = ROOT / "grpo_cli"


# --------------------------------------------------------------------------- imports

# The layers, lowest first. A module imports modules of its own layer or lower ones only,
# lazy and type-only imports included; a trainer's plug-in (grpo_cli/trl.py, grpo_cli/verl.py:
# one module each, imported by none) and the package's root (grpo_cli/__init__.py: the public
# names, imported lazily) sit above ``report``, and ``__main__`` runs the CLI.
LAYERS = ("core", "io", "engines", "jobs", "report", "trl", "verl", "", "cli", "__main__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, package: str) -> Iterator[str]:
    """Every grpo_cli module a module imports: at module level, inside functions, and
    under ``if TYPE_CHECKING:`` (a type-only import is a dependency too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("grpo_cli"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            if base.startswith("grpo_cli"):
                yield base
                for alias in node.names:  # ``from grpo_cli.engines import polars``
                    yield f"{base}.{alias.name}"


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set(_imports(ast.parse(path.read_text()), package))
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def layer(module: str) -> int:
    """The rank of ``module``'s layer in :data:`LAYERS` (its folder under grpo_cli)."""
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    )


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_sits_in_a_layer() -> None:
    """No flat module: each one is in a layer's folder (only the package's ``__init__`` and
    ``__main__`` at the top)."""
    graph = import_graph()
    flat = sorted(m for m in graph if m.count(".") == 1 and m.split(".")[1] not in LAYERS)
    assert flat == []
    assert {m.split(".")[1] for m in graph if m.count(".") >= 1} <= set(LAYERS)


def test_each_layer_imports_only_lower_ones() -> None:
    graph = import_graph()
    assert "grpo_cli.core.plan" in graph and "grpo_cli.engines.polars" in graph
    assert upward_imports(graph) == []


def test_the_package_has_no_import_circle() -> None:
    """Type-only imports counted: a circle of them is still a circle a reader must untie."""
    graph = import_graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_checks_find_what_they_look_for() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    graph = {"grpo_cli.core.plan": {"grpo_cli.engines.polars"}, "grpo_cli.engines.polars": set()}
    assert upward_imports(graph) == ["grpo_cli.core.plan -> grpo_cli.engines.polars"]
    tree = ast.parse("if TYPE_CHECKING:\n    from grpo_cli.jobs.run import JobResult\n")
    assert "grpo_cli.jobs.run" in set(_imports(tree, "grpo_cli.core"))


def test_the_library_never_imports_typer_or_rich() -> None:
    """Only cli/ may: the library's modules import neither, even lazily."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts[:1] or path.name == "__main__.py":
            continue
        imported = set(_all_imports(ast.parse(path.read_text())))
        assert not {m for m in imported if m.split(".")[0] in {"typer", "rich", "click"}}, path


def _all_imports(tree: ast.AST) -> Iterator[str]:
    """Every module imported, at run time or for type checking only."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_the_cli_names_no_engine() -> None:
    """The CLI parses, makes one library call and renders: no module under cli/ imports
    the engine registry or an engine (type-only imports included) or spells an engine's
    module path, and compute's command names no engine: the job picks it
    (grpo_cli.jobs.run.run_job)."""
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = [m for m in _all_imports(tree) if m.startswith("grpo_cli.engines")]
        assert imported == [], (path.name, imported)
        literals = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        assert not [text for text in literals if "grpo_cli.engines" in text], path.name
    compute = ast.parse((PACKAGE / "cli" / "compute.py").read_text())
    words = {
        word
        for node in ast.walk(compute)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for word in re.findall(r"[a-z_]+", node.value)
    } | {node.id for node in ast.walk(compute) if isinstance(node, ast.Name)}
    assert not words & set(ENGINES), sorted(words & set(ENGINES))


# Each command's one library entry: the job it runs, in the core module that owns it.
COMMAND_ENTRIES = {
    "compute": ("grpo_cli.jobs.run", "run_job"),
    "verify": ("grpo_cli.report.verify", "run_verify"),
    "summarize": ("grpo_cli.report.summarize", "run_summarize"),
    "plot": ("grpo_cli.report.plot", "run_plot"),
    "explain": ("grpo_cli.report.explain", "run_explain"),
    "compare": ("grpo_cli.report.compare", "run_compare"),
}
# What a command module may take from the core besides its entry: rendering, exit codes,
# the registries its --help and completions list, and compute's parsing of its engine
# flags and of INPUT.
CLI_HELPERS = {
    ("grpo_cli.core.estimators", "ESTIMATORS"),
    ("grpo_cli.core.presets", "PRESETS"),
    ("grpo_cli.io.formats", "DATA_FORMATS"),  # the format registry, for --help
    ("grpo_cli.io.formats", "TABLE_FORMATS"),
    ("grpo_cli.io.formats", "describe"),
    ("grpo_cli.core.errors", "option"),  # names an option in a message the CLI spells
    ("grpo_cli.jobs.outputs", "sources_or_stdin"),
}


def _core_names(tree: ast.AST) -> Iterator[tuple[str, str]]:
    """(module, name) of every name imported at run time from a core module (grpo_cli.*
    outside grpo_cli.cli); ``import grpo_cli.x`` as (module, "*")."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("grpo_cli.cli") or not node.module.startswith("grpo_cli"):
                continue
            if node.module == "grpo_cli":
                yield from (("grpo_cli." + alias.name, "*") for alias in node.names)
            else:
                yield from ((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("grpo_cli") and not alias.name.startswith("grpo_cli.cli"):
                    yield alias.name, "*"


@pytest.mark.parametrize("command", sorted(COMMAND_ENTRIES))
def test_each_command_is_parse_one_library_call_render(command: str) -> None:
    """A command module parses its options, makes one call into its library entry (which
    reads, computes and writes) and renders the result: it takes nothing else from the
    core but rendering, exit codes and the registries its --help lists, and it calls no
    other command's entry."""
    module, entry = COMMAND_ENTRIES[command]
    tree = ast.parse((PACKAGE / "cli" / f"{command}.py").read_text())
    taken = set(_core_names(tree))
    others = {
        (m, name)
        for m, name in taken
        if (m, name) != (module, entry)
        and m != "grpo_cli.cli.render"
        and not (m == "grpo_cli.core.errors" and name.startswith("EXIT_"))
        and (m, name) not in CLI_HELPERS
    }
    assert others == set(), sorted(others)
    called = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    assert called.count(entry) == 1, called
    entries = {name for _, name in COMMAND_ENTRIES.values()}
    assert [name for name in called if name in entries and name != entry] == []


def test_every_command_has_its_library_entry() -> None:
    """Every command registered in the app (but ``presets``, a listing) has an entry in
    COMMAND_ENTRIES, exported from the package."""
    import importlib

    import grpo_cli
    from grpo_cli.cli.app import app

    names = {info.name or "" for info in app.registered_commands}
    assert names - {"presets"} == set(COMMAND_ENTRIES)
    for module, entry in COMMAND_ENTRIES.values():
        assert callable(getattr(importlib.import_module(module), entry))
        assert getattr(grpo_cli, entry) is getattr(importlib.import_module(module), entry)


def test_temporary_columns_are_named_in_one_place() -> None:
    """Every ``"__grpo_..."`` literal lives in grpo_cli/core/columns.py."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "columns.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("__grpo_")
                and len(node.value) > len("__grpo_")
            ):
                offenders.append(f"{path.relative_to(ROOT)}: {node.value}")
    assert offenders == []


# --------------------------------------------------------------------------- registries


def test_estimator_facts() -> None:
    scopes = {name for name, e in ESTIMATORS.items() if e.scope == "batch"}
    assert scopes == {"batch_std", "gpg", "reinforce_pp", "reinforce_pp_baseline", "batch_baseline"}
    assert {name for name, e in ESTIMATORS.items() if e.unit == "step"} == {"process"}
    assert {name for name, e in ESTIMATORS.items() if e.whitens} == {
        "reinforce_pp",
        "reinforce_pp_baseline",
    }
    assert {name for name, e in ESTIMATORS.items() if not e.uses_groups} == {
        "reinforce_pp",
        "remax",
        "batch_baseline",
    }


@pytest.mark.parametrize(
    ("eps_mode", "formula"),
    [
        ("std", "A = (r - mean) / (std + eps)"),
        ("var", "A = (r - mean) / sqrt(var + eps)"),
        ("var_floor", "A = (r - mean) / sqrt(max(var, eps))"),
        ("positive_std", "A = (r - mean) / (std + eps)"),  # the branch where var > 0
    ],
)
def test_explain_writes_the_formula_the_engines_run(eps_mode: str, formula: str) -> None:
    """explain's formula line is the estimator's own function rendered in symbols (eps
    placed by FormulaContext.norm, the one place), not a text kept beside it."""
    log = pl.DataFrame({"prompt_id": ["p", "p", "q", "q"], "reward": [0.0, 1.0, 0.5, 2.0]})
    grpo = explain_one(log, None, {"eps_mode": eps_mode}, "p").formula
    batch = explain_one(log, None, {"eps_mode": eps_mode, "estimator": "batch_std"}, "p").formula
    assert grpo == formula
    assert batch == formula.replace("var", "var_b").replace("std", "std_b")


def test_a_new_estimator_is_one_decorated_function() -> None:
    """Registered here, it computes through every layer with no other change."""

    @register_estimator("half_centred", "(r - mean_g) / 2", "a test")
    def half_centred(ctx: Any) -> pl.Expr:
        centred: pl.Expr = ctx.reward - ctx.group_mean()
        return centred / 2

    try:
        log = make_log({"a": [1.0, 0.0, 0.5], "b": [2.0], "c": [1.0, None, 3.0]})
        got = compute_advantages(log, estimator="half_centred")["advantage"].to_list()
        # b is a singleton (advantage 0 by default); c's null keeps a null advantage.
        assert got == [0.25, -0.25, 0.0, 0.0, -0.5, None, 0.5]
        # explain writes it out from the same function
        explained = explain_one(log, None, {"estimator": "half_centred"}, "a")
        assert explained.formula == "A = (r - mean) / 2"
        assert [row.formula for row in explained.rows] == [
            "(1 - 0.5) / 2",
            "(0 - 0.5) / 2",
            "(0.5 - 0.5) / 2",
        ]
        assert [row.value for row in explained.rows] == [0.25, -0.25, 0.0]
    finally:
        del ESTIMATORS["half_centred"]


def test_backend_choices_come_from_the_engine_registry() -> None:
    assert list(BACKENDS) == list(ENGINES) == ["polars", "partitioned", "torch", "ray"]
    assert get_engine("polars").info.io == "frame"
    assert get_engine("partitioned").info.io == "file"
    assert get_engine("ray").info.io == "dataset"
    with pytest.raises(OptionsError) as info:
        get_engine("spark")
    assert info.value.hint == "choose one of: polars, partitioned, torch, ray"


def test_a_file_engine_is_refused_for_a_frame() -> None:
    with pytest.raises(OptionsError) as info:
        compute_advantages(make_log({"a": [1.0, 0.0]}), backend="partitioned")
    assert info.value.message == (
        'backend="partitioned" reads and writes files, not an in-memory frame'
    )  # the Python API names keyword arguments (the CLI: --backend partitioned)
    assert str(info.value.hint) == (  # verify's refusal gives the same hint
        'use backend="polars" or torch; for logs too large for one machine, '
        'backend="partitioned" on files writes the advantages (grpo-adv compute, '
        "grpo_cli.run_job)"
    )


@pytest.mark.parametrize("estimator", ["batch_std", "gpg", "reinforce_pp_baseline", "process"])
def test_the_partitioned_engine_refuses_only_process_supervision(estimator: str) -> None:
    """Batch statistics come from merged partials (tests/test_lowmem.py checks the
    numbers); per-step advantages are not computed there."""
    from grpo_cli.core.resolve import make_request

    steps = "steps" if estimator == "process" else None
    request = make_request(None, {"estimator": estimator, "step_rewards_col": steps})
    reason = get_engine("partitioned").refusal(request)
    assert reason == ("process supervision" if estimator == "process" else None)


# --------------------------------------------------------------------------- one plan


def test_a_hash_collision_reruns_on_the_exact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import grpo_cli.core.plan as plan

    hashed: list[bool] = []

    def always_on_hashes(frame: pl.DataFrame, keys: Any) -> bool:
        hashed.append(keys.hashed)
        return bool(keys.hashed)

    monkeypatch.setattr(plan, "hash_collision", always_on_hashes)
    log = hostile_log(with_nulls=True)
    got = compute_advantages(log, deterministic=True)["advantage"]
    assert hashed == [True]  # checked once, then rerun on the exact key
    expected = compute_advantages(pl.LazyFrame(log)).collect()["advantage"]  # exact key
    assert (got - expected).abs().max() <= 1e-12  # type: ignore[operator]


@pytest.mark.slow
def test_the_partitioned_engine_recovers_from_a_collision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A shared 64-bit hash restarts the run with the exact key spilled (it exited 70)."""
    import grpo_cli.engines.partitioned as partitioned
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.engines.partitioned import annotate_to_parquet

    calls: list[int] = []

    def first_partition_collides(part: pl.DataFrame, keys: Keys) -> bool:
        if keys.check is None:  # the exact run: no hash to check
            return False
        calls.append(part.height)
        return len(calls) == 1

    monkeypatch.setattr(partitioned, "hash_collision", first_partition_collides)
    log = hostile_log(with_nulls=True)
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    log.write_parquet(source)
    run = annotate_to_parquet(source, out, AdvantageOptions(deterministic=True), partitions=4)
    assert len(calls) == 1  # the exact run checks no hash
    expected = compute_advantages(log, deterministic=True)
    got = pl.read_parquet(out)
    assert got.drop("advantage").equals(log)
    diff = (got["advantage"] - expected["advantage"]).abs().max()
    assert diff is not None and diff <= 1e-12  # type: ignore[operator]
    assert run.rows == log.height
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]

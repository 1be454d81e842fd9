"""One resolution per job: every command on every engine reads a log whose columns have
other names than the defaults (``global_step``, ``completion_length``, ``uid``, several
files, a TRL dump split mid-step) the same way, and gives the numbers of the options
named by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli import compute_advantages
from grpo_cli.cli.app import app
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.presets import get_preset
from tests.conftest import SAMPLE_DIR, import_or_skip

# The roles the tool must find by itself, named by hand.
ROLES: dict[str, Any] = {
    "group_cols": ("global_step", "prompt_id"),
    "length_col": "completion_length",
}
ENGINES = {
    "polars": [],
    "torch": ["--backend", "torch"],
    "low-memory": ["--low-memory"],
}


def renamed_log() -> pl.DataFrame:
    """3 steps of 4 prompts sampled again every step, 4 responses each, in shuffled order:
    a step column named ``global_step``, lengths in ``completion_length``, responses
    named by ``uid``."""
    rng = np.random.default_rng(29)
    rows = [
        (step, f"p{p}", f"{step}-{p}-{i}") for step in (1, 2, 3) for p in range(4) for i in range(4)
    ]
    order = rng.permutation(len(rows))
    return pl.DataFrame(
        {
            "global_step": [rows[i][0] for i in order],
            "prompt_id": [rows[i][1] for i in order],
            "uid": [rows[i][2] for i in order],
            "reward": rng.normal(size=len(rows)).round(3),
            "completion_length": rng.integers(5, 60, size=len(rows)),
        }
    )


def expected(log: pl.DataFrame, estimator: str) -> dict[str, float]:
    """Each response's advantage with the roles named by hand."""
    done = compute_advantages(log, estimator=estimator, **ROLES)
    return dict(zip(done["uid"], done["advantage"], strict=True))


def assert_numbers(got: pl.DataFrame, want: dict[str, float], column: str = "advantage") -> None:
    assert sorted(got["uid"]) == sorted(want)
    values = dict(zip(got["uid"], got[column], strict=True))
    np.testing.assert_allclose(
        [values[u] for u in want], list(want.values()), rtol=1e-12, atol=1e-12
    )


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "log.parquet"
    renamed_log().write_parquet(path)
    return path


@pytest.mark.parametrize("estimator", ["grpo", "opo"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_compute_finds_the_same_roles_on_every_engine(
    runner: CliRunner, log_file: Path, tmp_path: Path, engine: str, estimator: str
) -> None:
    """``-e opo`` takes ``completion_length`` and every estimator groups within
    ``global_step`` on each engine (--low-memory used to look for a column ``length``)."""
    if engine == "torch":
        import_or_skip("torch")
    out = tmp_path / "out.parquet"
    args = ["compute", str(log_file), "-e", estimator, "-o", str(out), "-q", *ENGINES[engine]]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert_numbers(pl.read_parquet(out), expected(renamed_log(), estimator))


@pytest.mark.parametrize("engine", ["polars", "torch"])
def test_several_files_with_out_dir_are_one_log(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    """Three files cut in the middle of groups, written back one per input: the numbers
    of the whole log (the source index --out-dir adds is no role)."""
    if engine == "torch":
        import_or_skip("torch")
    log = renamed_log()
    inputs = [tmp_path / f"part_{i}.parquet" for i in range(3)]
    for i, path in enumerate(inputs):
        log.slice(i * 17, 17 if i < 2 else None).write_parquet(path)
    out = tmp_path / "out"
    out.mkdir()
    args = ["compute", *map(str, inputs), "-e", "opo", "--out-dir", str(out), "-q"]
    result = runner.invoke(app, [*args, *ENGINES[engine]])
    assert result.exit_code == 0, result.output
    written = [pl.read_parquet(out / f"part_{i}.adv.parquet") for i in range(3)]
    assert [w.height for w in written] == [17, 17, 14]
    assert_numbers(pl.concat(written), expected(log, "opo"))


def test_the_report_commands_resolve_as_compute_does(
    runner: CliRunner, log_file: Path, tmp_path: Path
) -> None:
    """verify, summarize, explain and compare find the same step and length columns."""
    log = renamed_log()
    annotated = tmp_path / "annotated.parquet"
    made = runner.invoke(app, ["compute", str(log_file), "-e", "opo", "-o", str(annotated)])
    assert made.exit_code == 0, made.output

    verified = runner.invoke(app, ["verify", str(annotated), "-e", "opo"])
    assert verified.exit_code == 0, verified.output
    assert "agree" in verified.stderr
    # 12 groups: 4 prompts within each of 3 steps (4 across the log)
    assert "groups over tolerance │ 0 of 12" in " ".join(verified.stderr.split())

    groups = tmp_path / "groups.csv"
    summarized = runner.invoke(
        app, ["summarize", str(log_file), "--level", "group", "-o", str(groups)]
    )
    assert summarized.exit_code == 0, summarized.output
    table = pl.read_csv(groups).sort("global_step", "prompt_id")
    means = log.group_by("global_step", "prompt_id").agg(pl.col("reward").mean())
    means = means.sort("global_step", "prompt_id")
    assert table.height == 12
    np.testing.assert_allclose(table["mean"], means["reward"], rtol=1e-12)

    explained = runner.invoke(app, ["explain", str(log_file), "--row", "0", "-e", "opo"])
    assert explained.exit_code == 0, explained.output
    first = log.row(0, named=True)
    header = f"group global_step={first['global_step']}, prompt_id={first['prompt_id']}"
    assert explained.stdout.startswith(header), explained.stdout
    assert "using the length column 'completion_length'" in explained.stderr

    compared = tmp_path / "compared.parquet"
    args = ["compare", str(log_file), "-e", "grpo", "-e", "opo", "-o", str(compared)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pl.read_parquet(compared)
    assert_numbers(table, expected(log, "grpo"), "advantage_grpo")
    assert_numbers(table, expected(log, "opo"), "advantage_opo")


def test_a_trl_dump_split_mid_step_has_the_numbers_of_its_roles(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A TRL dump cut into two files inside a group of a step: with --out-dir its rewards
    are its numeric columns (never the source index), its groups runs of G rows within a
    step; the numbers are those of the roles named by hand."""
    files = sorted((SAMPLE_DIR / "trl_completions").glob("*.parquet"))
    log = pl.concat([pl.read_parquet(p) for p in files]).drop("advantage", strict=False)
    parts = [tmp_path / "part_1.parquet", tmp_path / "part_2.parquet"]
    log.head(18).write_parquet(parts[0])
    log.slice(18).write_parquet(parts[1])
    out = tmp_path / "out"
    out.mkdir()
    args = ["compute", *map(str, parts), "--preset", "trl", "--out-dir", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    got = pl.concat([pl.read_parquet(out / f"part_{i}.adv.parquet") for i in (1, 2)])
    by_hand = compute_advantages(
        log,
        AdvantageOptions(
            **get_preset("trl").options,
            reward_cols=("accuracy_reward", "format_reward"),
            group_size=4,
            batch_col="step",
        ),
    )
    np.testing.assert_allclose(got["advantage"], by_hand["advantage"], rtol=1e-12, atol=1e-12)
    assert float(got["advantage"].abs().max()) > 0.5  # type: ignore[arg-type]  # not zeros


def test_ray_tasks_run_the_plan_resolved_once(runner: CliRunner, tmp_path: Path) -> None:
    """--backend ray on two files of the renamed log: the plan resolved on the first
    file's schema (the length and step columns found) is what every task runs."""
    import logging

    ray = import_or_skip("ray")
    log = renamed_log()
    folder = tmp_path / "in"
    folder.mkdir()
    log.head(20).write_parquet(folder / "a.parquet")
    log.slice(20).write_parquet(folder / "b.parquet")
    out = tmp_path / "out"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        args = ["compute", str(folder), "-e", "opo", "--backend", "ray", "-o", str(out), "-q"]
        result = runner.invoke(app, args)
    finally:
        ray.shutdown()
    assert result.exit_code == 0, result.output
    assert_numbers(pl.read_parquet(out / "*.parquet"), expected(log, "opo"))


def test_the_plan_names_the_step_column_the_key_and_the_warnings_read() -> None:
    from grpo_cli.core.resolve import make_request, resolve
    from grpo_cli.core.run_summary import span_warnings

    log = renamed_log().with_columns(pl.col("global_step").alias("iteration"))
    plan = resolve(make_request(None, {"estimator": "batch_std"}), log)
    assert plan.step_col == "global_step"  # the first of STEP_COLUMNS the log has
    assert plan.options.group_cols == ("global_step", "prompt_id")
    assert str(span_warnings(log, plan)[0]).endswith('per step): batch_col="global_step"')
    unstepped = log.drop("global_step", "iteration")
    assert resolve(make_request(None, {}), unstepped).step_col is None

"""Numbers in human output: counts with thousands separators everywhere, keys (a step) as
they are, numbers right-aligned in verify's worst-groups table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from grpo_cli.cli import app

WIDE = {"COLUMNS": "200"}


def _figure(stderr: str, name: str) -> str:
    """The value of one row of a figure table (``│ name │ value │``)."""
    line = next(line for line in stderr.splitlines() if line.startswith(f"│ {name} "))
    return line.split("│")[2].strip()


def test_compute_summary_counts_have_separators(tmp_path: Path) -> None:
    rows = [(f"flat{g}", r) for g in range(2_000) for r in (1.0, 1.0, None)]
    rows += [(f"one{g}", 0.5) for g in range(1_500)]
    source = tmp_path / "log.csv"
    pl.DataFrame(rows, schema=["prompt_id", "reward"], orient="row").write_csv(source)
    result = CliRunner().invoke(
        app, ["compute", str(source), "-o", str(tmp_path / "o.csv")], env=WIDE
    )
    assert result.exit_code == 0, result.output
    assert _figure(result.stderr, "rows") == "7,500"
    assert _figure(result.stderr, "zero-variance groups").startswith("2,000 (57.1%)")
    assert _figure(result.stderr, "singleton groups") == "1,500 (--singleton zero)"
    assert _figure(result.stderr, "null rewards") == "2,000 (--nulls exclude)"
    assert "warning: 2,000 null or NaN reward(s)" in result.stderr


def test_summarize_steps_are_keys_not_counts(tmp_path: Path) -> None:
    rows = [(s, f"p{g}", r) for s in (1000, 2000) for g in range(2) for r in (0.0, 1.0)]
    source = tmp_path / "log.csv"
    pl.DataFrame(rows, schema=["step", "prompt_id", "reward"], orient="row").write_csv(source)
    result = CliRunner().invoke(app, ["summarize", str(source)], env=WIDE)
    assert result.exit_code == 0, result.output
    step_rows = [line for line in result.stderr.splitlines() if line.startswith("│ ")]
    assert any(line.startswith("│ 1000 │") for line in step_rows)
    assert not any("1,000" in line for line in step_rows)


def test_verify_worst_groups_right_aligns_numbers() -> None:
    folder = Path(__file__).resolve().parents[1] / "sample_data" / "trl_completions"
    args = ["verify", str(folder), "--preset", "trl-none", "--top", "2"]
    result = CliRunner().invoke(app, args, env=WIDE)
    assert result.exit_code == 1  # trl-none is not how this log was made
    lines = result.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if "┃ step ┃" in line)
    assert (
        lines[header]
        == "┃ step ┃ group_index ┃ prompt                       ┃ size ┃ max_abs_diff ┃"
    )
    assert (
        lines[header + 2]
        == "│   10 │           0 │ Question 1-0: what is 0 + 1? │    4 │        1.124 │"
    )
    assert (
        lines[header + 3]
        == "│   20 │           0 │ Question 2-0: what is 0 + 2? │    4 │       0.7862 │"
    )

"""CSV group keys: compared exactly as text, written back with the type they read as.

A CSV has no types; grpo-adv reads key columns as text so that ``007`` and ``7`` stay two
prompts, and gives a key column back its number type when every value reads back as the
same text, so that ``-g step -g prompt_id`` keeps ``step`` an integer: written as one,
sorted as one (1, 2, ..., 10, 11, not 1, 10, 11, 2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.io.read import read_rewards, typed_keys

STEPS = [1, 2, 3, 10, 11, 12]


def write_log(tmp_path: Path) -> Path:
    rows = [f"{step},p{step % 2},{reward}" for step in STEPS for reward in (0.0, 1.0)]
    path = tmp_path / "log.csv"
    path.write_text("step,prompt_id,reward\n" + "\n".join(rows) + "\n")
    return path


class TestTypedKeys:
    def test_plain_integers_and_floats_get_their_type(self) -> None:
        frame = pl.DataFrame({"step": ["1", "10", None], "x": ["1.5", "2.0", "0.25"]})
        typed = typed_keys(frame, ["step", "x"])
        assert typed.schema == pl.Schema({"step": pl.Int64, "x": pl.Float64})
        assert typed["step"].to_list() == [1, 10, None]
        assert typed["x"].to_list() == [1.5, 2.0, 0.25]

    @pytest.mark.parametrize("values", [["007", "7"], ["7.50", "1.0"], [" 7", "8"], ["1e3", "2"]])
    def test_text_that_would_not_read_back_stays_text(self, values: list[str]) -> None:
        frame = pl.DataFrame({"k": values})
        assert typed_keys(frame, ["k"])["k"].to_list() == values

    def test_leading_zeros_stay_two_prompts(self, tmp_path: Path) -> None:
        path = tmp_path / "zeros.csv"
        path.write_text("prompt_id,reward\n007,1\n007,0\n7,1\n7,1\n")
        frame = read_rewards(path, string_cols=["prompt_id"]).frame
        assert frame["prompt_id"].to_list() == ["007", "007", "7", "7"]


class TestStepAsGroupKey:
    ARGS = ("-g", "step", "-g", "prompt_id")

    @pytest.mark.parametrize("suffix", ["parquet", "jsonl", "csv"])
    def test_compute_writes_step_as_an_integer(
        self, runner: CliRunner, tmp_path: Path, suffix: str
    ) -> None:
        out = tmp_path / f"out.{suffix}"
        result = runner.invoke(
            app, ["compute", str(write_log(tmp_path)), *self.ARGS, "-o", str(out)]
        )
        assert result.exit_code == 0, result.stderr
        written = (
            pl.read_csv(out)
            if suffix == "csv"
            else pl.read_parquet(out)
            if suffix == "parquet"
            else pl.read_ndjson(out)
        )
        assert written.schema["step"] == pl.Int64
        assert written["step"].to_list() == [s for s in STEPS for _ in (0, 1)]
        assert written["advantage"].to_list() == pytest.approx(
            [-0.5 / (0.5**0.5 + 1e-8), 0.5 / (0.5**0.5 + 1e-8)] * len(STEPS), abs=1e-15
        )

    def test_summarize_orders_steps_as_numbers(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "steps.jsonl"
        args = ["summarize", str(write_log(tmp_path)), *self.ARGS, "-o", str(out)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        assert pl.read_ndjson(out)["step"].to_list() == STEPS

"""The benchmark's synthetic logs: exact sizes, the promised shape, deterministic."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_logs import make_log, write_big_log, write_step_log


def test_make_log_shape_and_determinism() -> None:
    log = make_log(20_000, seed=3)
    assert log.height == 20_000
    assert log.columns == ["step", "prompt_id", "reward"]
    sizes = log.group_by("prompt_id").len()["len"]
    assert sizes.min() >= 1 and sizes.max() <= 64  # type: ignore[operator]
    assert make_log(20_000, seed=3).equals(log)
    grouped = make_log(20_000, seed=3, order="grouped")
    assert grouped["prompt_id"].is_sorted()


def test_big_log_is_written_in_chunks(tmp_path: Path) -> None:
    path = write_big_log(tmp_path / "big.parquet", 30_000, chunk=7_000)
    log = pl.read_parquet(path)
    assert log.height == 30_000
    spans = (
        log.with_row_index("row")
        .group_by("prompt_id")
        .agg(span=pl.col("row").max() - pl.col("row").min())
    )
    assert spans["span"].max() > 7_000  # type: ignore[operator]  # groups cross chunks
    assert not log["prompt_id"].is_sorted()


def test_step_log_is_in_step_order_and_shuffled_within_steps(tmp_path: Path) -> None:
    path = write_step_log(tmp_path / "step.parquet", 30_000, prompts_per_step=16, chunk_steps=5)
    log = pl.read_parquet(path)
    assert log.height == 30_000
    assert log["step"].is_sorted()
    per_step = log.group_by("step").agg(prompts=pl.col("prompt_id").n_unique())
    assert per_step["prompts"].max() == 16
    assert not log["prompt_id"].is_sorted()  # shuffled within steps
    assert log.group_by("prompt_id").agg(pl.col("step").n_unique())["step"].max() == 1
    assert write_step_log(tmp_path / "step.parquet", 30_000) == path  # kept, not rewritten

"""The shipped sample log: regenerated identically by its script, with the promised cases."""

from __future__ import annotations

import polars as pl

from tests.conftest import SAMPLE_FILES, load_script


def test_script_regenerates_the_committed_files() -> None:
    frame = load_script("make_sample_data").make_sample_log()
    assert frame.equals(pl.read_parquet(SAMPLE_FILES["parquet"]))
    assert frame.equals(pl.read_ndjson(SAMPLE_FILES["jsonl"]))
    assert frame.equals(pl.read_csv(SAMPLE_FILES["csv"], schema_overrides={"reward": pl.Float64}))


def test_sample_has_the_promised_cases() -> None:
    frame = pl.read_parquet(SAMPLE_FILES["parquet"])
    sizes = frame.group_by("prompt_id").agg(
        n=pl.len(), zero=(pl.col("reward").max() == pl.col("reward").min()) & (pl.len() > 1)
    )
    assert frame["prompt_id"].n_unique() == 64
    assert frame["step"].unique().sort().to_list() == [1, 2, 3, 4]
    assert (sizes["n"].min(), sizes["n"].max()) == (1, 16)
    assert sizes["zero"].sum() >= 1
    assert frame["reward"].null_count() == 1
    binary = frame.filter(pl.col("task") == "math")["reward"].drop_nulls().unique().sort()
    assert binary.to_list() == [0.0, 1.0]
    continuous = frame.filter(pl.col("task") == "chat")["reward"]
    assert continuous.n_unique() > 100
    for path in SAMPLE_FILES.values():
        assert path.stat().st_size < 200_000

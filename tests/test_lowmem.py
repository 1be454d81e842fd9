"""--low-memory: the partitioned path gives what the in-memory path gives, and cleans up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.engines.partitioned import annotate_to_parquet
from grpo_cli.errors import OptionsError
from grpo_cli.options import AdvantageOptions
from grpo_cli.pipeline import annotate
from tests.conftest import SAMPLE_FILES
from tests.test_presets import hostile_log

CASES: list[dict[str, Any]] = [
    {},
    {"estimator": "dr_grpo"},
    {"estimator": "rloo", "singleton": "verl"},
    {"estimator": "opo", "length_col": "length"},
    {"estimator": "grpo_passk", "singleton": "null"},
    {"nulls": "zero", "singleton": "raw", "clip": (-1.0, 1.0)},
    {"group_cols": ("step", "prompt_id"), "ddof": 0, "eps_mode": "var"},
    {"with_stats": True},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(c) or "defaults")
def test_same_result_as_in_memory(tmp_path: Path, case: dict[str, Any]) -> None:
    log = hostile_log(with_nulls=True)
    source = tmp_path / "log.parquet"
    log.write_parquet(source)
    options = AdvantageOptions(deterministic=True, **case)
    out = tmp_path / "out.parquet"
    run = annotate_to_parquet(source, out, options, partitions=3, chunk_rows=7)
    expected = annotate(log, deterministic=True, **case)
    assert pl.read_parquet(out).equals(expected.frame)
    for name in (
        "rows",
        "groups",
        "group_size_min",
        "group_size_median",
        "group_size_max",
        "zero_std_groups",
        "singleton_groups",
        "null_rewards",
        "advantage_min",
        "advantage_max",
    ):
        assert getattr(run, name) == getattr(expected.run, name), name
    assert run.reward_std == pytest.approx(expected.run.reward_std, rel=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]


@pytest.mark.parametrize("estimator", ["batch_std", "gpg", "reinforce_pp_baseline", "process"])
def test_refuses_what_needs_whole_batches(tmp_path: Path, estimator: str) -> None:
    with pytest.raises(OptionsError):
        annotate_to_parquet(
            SAMPLE_FILES["parquet"],
            tmp_path / "o.parquet",
            AdvantageOptions(
                estimator=estimator, step_rewards_col="x" if estimator == "process" else None
            ),
        )


def test_cli_low_memory(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    out = sample_copy["parquet"].with_name("lm.parquet")
    args = [
        "compute",
        str(sample_copy["parquet"]),
        "-o",
        str(out),
        "--low-memory",
        "--deterministic",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "│ rows                          │ 570" in result.stderr
    expected = annotate(pl.read_parquet(sample_copy["parquet"]), deterministic=True).frame
    assert pl.read_parquet(out).equals(expected)
    csv = runner.invoke(
        app, ["compute", str(sample_copy["csv"]), "-o", str(out), "-f", "--low-memory"]
    )
    assert csv.exit_code == 2
    assert csv.stderr.startswith("error: --low-memory needs a Parquet input;")

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


class TestFooterChecks:
    """--low-memory checks a Parquet log's keys and rewards through its footer statistics
    when they show nothing to refuse, and scans them otherwise (grpo_cli.plan.parquet_plan)."""

    def test_the_footer_statistics(self, tmp_path: Path) -> None:
        from grpo_cli.io import parquet_footer_stats
        from grpo_cli.schema import FooterStats

        path = tmp_path / "log.parquet"
        pl.DataFrame(
            {
                "prompt_id": ["a", None, "b", "b"],
                "reward": [0.5, -2.0, float("nan"), 3.0],
                "flag": [True, False, True, None],
            }
        ).write_parquet(path, row_group_size=2)
        stats = parquet_footer_stats(path, ["prompt_id", "reward", "flag", "missing"])
        assert stats["prompt_id"].nulls == 1
        assert stats["reward"] == FooterStats(0, -2.0, 3.0)  # NaN is in neither bound
        assert stats["flag"] == FooterStats(1, 0.0, 1.0)
        assert "missing" not in stats
        bare = tmp_path / "bare.parquet"
        pl.read_parquet(path).write_parquet(bare, statistics=False)
        assert parquet_footer_stats(bare, ["prompt_id", "reward"]) == {}

    def test_a_clean_footer_spares_the_pass(self) -> None:
        """The footer is trusted to skip, never to refuse: a footer that (wrongly) shows no
        null key lets a log with one through, which shows no pass over the keys ran."""
        from grpo_cli.estimators import get_estimator
        from grpo_cli.schema import FooterStats, check_frame

        log = pl.LazyFrame({"prompt_id": ["a", None], "reward": [1.0, float("inf")]})
        options = AdvantageOptions()
        clean = {"prompt_id": FooterStats(0), "reward": FooterStats(0, 0.0, 1.0)}
        check_frame(log, options, get_estimator("grpo"), clean)  # no pass: nothing raised
        with pytest.raises(Exception, match="null group or batch key"):
            check_frame(log, options, get_estimator("grpo"), {"reward": clean["reward"]})
        with pytest.raises(Exception, match="infinite reward"):
            check_frame(log, options, get_estimator("grpo"), {"prompt_id": FooterStats(0)})

    @pytest.mark.parametrize(
        ("column", "value", "message"),
        [
            ("prompt_id", None, "1 row(s) have a null group or batch key (step, prompt_id)"),
            ("reward", float("inf"), "1 row(s) have an infinite reward (reward)"),
            ("reward", 1e200, "1 row(s) have a reward of magnitude 1e+140 or more (reward)"),
        ],
    )
    @pytest.mark.parametrize("statistics", [True, False])
    def test_what_the_footer_shows_is_still_refused(
        self, tmp_path: Path, column: str, value: object, message: str, statistics: bool
    ) -> None:
        log = pl.read_parquet(SAMPLE_FILES["parquet"])
        bad = log.with_columns(
            pl.when(pl.int_range(pl.len()) == 5)
            .then(pl.lit(value))
            .otherwise(pl.col(column))
            .alias(column)
        )
        source = tmp_path / "bad.parquet"
        bad.write_parquet(source, statistics=statistics)
        out = tmp_path / "out.parquet"
        result = CliRunner().invoke(app, ["compute", str(source), "--low-memory", "-o", str(out)])
        assert result.exit_code == 3, result.stderr
        assert result.stderr.splitlines()[0].startswith(f"error: {message}")
        assert not out.exists()

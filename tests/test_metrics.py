"""One metrics module: every run figure defined once (grpo_cli.core.metrics), as partials that
merge; ``frac_reward_zero_std`` is TRL's everywhere (compute, summarize, --low-memory)."""

from __future__ import annotations

import functools
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grpo_cli.core import metrics
from grpo_cli.core.grouping import with_profile
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.engines.partitioned import annotate_to_parquet
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.summarize import summarize
from tests.conftest import import_or_skip
from tests.trainer_reference import trl_nanstd

NEAR = 1.000000001  # 1e-9 from 1.0: TRL's isclose(std, 0) counts the group (std 7.1e-10)


def case_log() -> pl.DataFrame:
    """step 1: a = [1.0, 1.000000001] (std 7.1e-10), b = [0, 1]; step 2: c = [0.5] (one
    reward), d = [3, null, 3] (exactly equal)."""
    return pl.DataFrame(
        {
            "step": [1, 1, 1, 1, 2, 2, 2, 2],
            "prompt_id": ["a", "b", "a", "b", "c", "d", "d", "d"],
            "reward": [1.0, 0.0, NEAR, 1.0, 0.5, 3.0, None, 3.0],
        },
        schema={"step": pl.Int64, "prompt_id": pl.String, "reward": pl.Float64},
    )


# TRL: a's 2 responses and d's 3 (the null one too: its group's std is 0) out of 8.
TRL_OVERALL = 5 / 8
TRL_STEPS = [2 / 4, 3 / 4]


def _rows(frame: pl.DataFrame, ddof: int = 1) -> pl.LazyFrame:
    """The log with the reward and group profile the partials read."""
    from grpo_cli.core.columns import REWARD_KEY

    lazy = frame.lazy().with_columns(pl.col("reward").fill_nan(None).alias(REWARD_KEY))
    return with_profile(lazy, ("prompt_id",), ddof)


# --------------------------------------------------------------------------- the CLI


class TestTrlEverywhere:
    @pytest.mark.usefixtures("width_80")
    def test_compute_run_summary(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "log.parquet"
        case_log().write_parquet(source)
        for ddof in ("1", "0"):  # the std is TRL's (ddof 1) whatever the run's ddof
            result = runner.invoke(
                app(),
                ["compute", str(source), "-o", str(tmp_path / "o.parquet"), "-f", "--ddof", ddof],
            )
            assert result.exit_code == 0, result.output
            # d is the one exactly-equal group; a counts for TRL's metric (it did not)
            assert "1 (25.0%); frac_reward_zero_std 0.6250" in result.stderr

    def test_summarize_overall_and_step_tables(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "log.parquet"
        case_log().write_parquet(source)
        tables = {}
        for level in ("overall", "step"):
            out = tmp_path / f"{level}.csv"
            result = runner.invoke(
                app(), ["summarize", str(source), "--level", level, "-o", str(out), "-q"]
            )
            assert result.exit_code == 0, result.output
            tables[level] = pl.read_csv(out)
        assert tables["overall"]["frac_reward_zero_std"].to_list() == [TRL_OVERALL]
        assert tables["step"]["frac_reward_zero_std"].to_list() == TRL_STEPS

    @pytest.mark.slow
    @pytest.mark.usefixtures("width_80")
    def test_low_memory_run_summary(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "log.parquet"
        case_log().write_parquet(source)
        out = tmp_path / "o.parquet"
        result = runner.invoke(app(), ["compute", str(source), "-o", str(out), "--low-memory"])
        assert result.exit_code == 0, result.output
        assert "1 (25.0%); frac_reward_zero_std 0.6250" in result.stderr

    def test_low_memory_partitions(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import grpo_cli.engines.narrow

        monkeypatch.setattr(grpo_cli.engines.narrow, "MERGE_EVERY", 2)  # merged on the way
        source = tmp_path / "log.parquet"
        case_log().write_parquet(source)
        for partitions in (1, 2, 5):
            run = annotate_to_parquet(
                source, tmp_path / "o.parquet", AdvantageOptions(), partitions=partitions
            )
            assert run.frac_reward_zero_std == TRL_OVERALL
            assert (run.groups, run.zero_std_groups, run.singleton_groups) == (4, 1, 1)
            assert run.group_size_median == 2.0

    def test_the_functions_agree(self) -> None:
        log = case_log()
        assert annotate(log).run.frac_reward_zero_std == TRL_OVERALL
        assert annotate(log, ddof=0).run.frac_reward_zero_std == TRL_OVERALL
        report = summarize(log, AdvantageOptions())
        assert report.overall["frac_reward_zero_std"].to_list() == [TRL_OVERALL]
        assert report.steps["frac_reward_zero_std"].to_list() == TRL_STEPS

    def test_the_torch_engine(self) -> None:
        import_or_skip("torch")
        run = annotate(case_log(), backend="torch", device="cpu").run
        assert run.frac_reward_zero_std == TRL_OVERALL
        assert (run.groups, run.zero_std_groups, run.group_size_median) == (4, 1, 2.0)

    def test_quiet_compute_does_no_metric_work(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def refuse(*args: Any, **kwargs: Any) -> pl.DataFrame:
            raise AssertionError("metrics computed under -q")

        monkeypatch.setattr(metrics, "partials", refuse)
        source = tmp_path / "log.parquet"
        case_log().write_parquet(source)
        args = ["compute", str(source), "-o", str(tmp_path / "o.parquet"), "-q"]
        result = runner.invoke(app(), args)
        assert result.exit_code == 0, result.output


def app() -> Any:
    from grpo_cli.cli import app as cli_app

    return cli_app


# --------------------------------------------------------------------------- by hand


class TestByHand:
    def test_every_figure(self) -> None:
        log = case_log().with_columns(
            adv=pl.Series([0.0, -1.0, 1.0, None, 0.0, 2.0, float("nan"), -3.0])
        )
        merged = metrics.partials(_rows(log), advantage=pl.col("adv"), batch=("step",))
        got = metrics.finish(merged).row(0, named=True)
        valid = [1.0, 0.0, NEAR, 1.0, 0.5, 3.0, 3.0]
        a_std, b_std = (NEAR - 1.0) / math.sqrt(2), math.sqrt(0.5)
        assert got["responses"] == 8 and got["groups"] == 4
        assert (got["group_size_min"], got["group_size_median"], got["group_size_max"]) == (
            1,
            2.0,  # sizes 1, 2, 2, 3
            3,
        )
        assert got["reward"] == pytest.approx(sum(valid) / 7, rel=1e-15)
        assert got["reward_std"] == pytest.approx(statistics.stdev(valid), rel=1e-14)
        assert got["frac_reward_zero_std"] == 5 / 8
        # a, b and d have a std (7 responses); c's response has none
        assert got["group_reward_std"] == pytest.approx((2 * a_std + 2 * b_std) / 7, rel=1e-14)
        assert (got["zero_std_groups"], got["zero_std_group_share"]) == (1, 1 / 4)
        assert (got["singleton_groups"], got["null_rewards"], got["batches"]) == (1, 1, 2)
        # NaN and null advantages are left out of the mean, not of frac_zero_advantage's rows
        assert got["advantage_mean"] == pytest.approx(-1 / 6, rel=1e-15)
        assert (got["advantage_min"], got["advantage_max"]) == (-3.0, 2.0)
        assert got["frac_zero_advantage"] == 2 / 8

    def test_per_step(self) -> None:
        steps = metrics.finish(metrics.partials(_rows(case_log()), ("step",)), ("step",))
        assert steps["step"].to_list() == [1, 2]
        assert steps["responses"].to_list() == [4, 4]
        assert steps["frac_reward_zero_std"].to_list() == TRL_STEPS
        assert steps["group_size_median"].to_list() == [2.0, 2.0]  # {2, 2}, {1, 3}
        assert steps["reward_std"][1] == pytest.approx(statistics.stdev([0.5, 3.0, 3.0]))

    def test_pass_rates(self) -> None:
        log = pl.DataFrame(
            {
                "prompt_id": ["x"] * 4 + ["y"] * 2 + ["z"] * 3 + ["w"],
                "reward": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, None],
            }
        )
        got = metrics.finish(metrics.partials(_rows(log), pass_rates=True)).row(0, named=True)
        # w has no valid reward: not scored
        assert got["pass_at_n"] == 2 / 3
        assert got["pass_at_1"] == pytest.approx((1 / 4 + 0 + 2 / 3) / 3, rel=1e-15)

    def test_median_of_an_even_count_and_the_histogram_merge(self) -> None:
        rows = _rows(case_log())
        one, two = (metrics.partials(rows.filter(pl.col("step") == s)) for s in (1, 2))
        merged = metrics.merge([one, two])
        assert merged[metrics.SIZE_HIST].to_list() == [
            [{"size": 1, "groups": 1}, {"size": 2, "groups": 2}, {"size": 3, "groups": 1}]
        ]
        sizes = pl.DataFrame({"prompt_id": ["p", "q", "q", "q"], "reward": [1.0] * 4})
        assert metrics.finish(metrics.partials(_rows(sizes)))["group_size_median"][0] == 2.0

    def test_one_part_merges_to_itself_exactly(self) -> None:
        part = metrics.partials(_rows(case_log()), advantage=pl.col("reward"))
        assert metrics.merge([part]).equals(part)

    def test_process_supervision(self) -> None:
        """Responses are the rows; a group's std is over all its step rewards."""
        log = pl.DataFrame(
            {
                "prompt_id": ["a", "a", "b"],
                "steps": [[1.0, 1.0], [1.0], [0.0, 1.0]],
            }
        )
        run = annotate(log, estimator="process", step_rewards_col="steps").run
        assert (run.rows, run.groups, run.group_size_median) == (3, 2, 1.5)
        assert run.frac_reward_zero_std == 2 / 3  # a's two responses
        assert (run.zero_std_groups, run.singleton_groups, run.null_rewards) == (1, 0, 0)
        assert run.reward_mean == pytest.approx(4 / 5)

    def test_a_by_column_named_like_a_figure_is_refused(self) -> None:
        from grpo_cli.core.errors import OptionsError

        log = case_log().rename({"step": "groups"})
        with pytest.raises(OptionsError, match="'groups'"):
            metrics.partials(_rows(log), ("groups",))


# --------------------------------------------------------------------------- properties

REWARDS = st.one_of(
    st.sampled_from([0.0, 1.0, 0.5, NEAR, 1.0000001, None]),
    st.floats(-100, 100, allow_nan=False),
)
GROUPS = st.lists(
    st.tuples(st.integers(1, 3), st.lists(REWARDS, min_size=1, max_size=6)),
    min_size=1,
    max_size=12,
)
INTEGER_FIGURES = (
    "responses",
    "groups",
    "group_size_min",
    "group_size_max",
    "zero_std_groups",
    "singleton_groups",
    "null_rewards",
    "batches",
)


def _log(groups: list[tuple[int, list[float | None]]]) -> pl.DataFrame:
    rows = [
        (step, f"g{i}", reward) for i, (step, rewards) in enumerate(groups) for reward in rewards
    ]
    return pl.DataFrame(
        rows,
        schema={"step": pl.Int64, "prompt_id": pl.String, "reward": pl.Float64},
        orient="row",
    ).with_columns(adv=pl.col("reward") * 2 - 1)


def _assert_same(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    assert got.columns == expected.columns
    assert got.height == expected.height
    for column in got.columns:
        a, b = got[column].to_list(), expected[column].to_list()
        if column in INTEGER_FIGURES or column == "step":
            assert a == b, column
        else:
            assert [x is None for x in a] == [y is None for y in b], column
            pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None]
            for x, y in pairs:
                assert x == pytest.approx(y, rel=1e-12, abs=1e-12), column


class TestMerge:
    @pytest.mark.slow
    @settings(max_examples=60, deadline=None)
    @given(groups=GROUPS, data=st.data(), ddof=st.sampled_from([0, 1]))
    def test_split_along_groups_then_merged_is_the_whole(
        self, groups: list[tuple[int, list[float | None]]], data: st.DataObject, ddof: int
    ) -> None:
        log = _log(groups)
        k = data.draw(st.integers(1, 4))
        parts = data.draw(
            st.lists(st.integers(0, k - 1), min_size=len(groups), max_size=len(groups))
        )
        part_of = {f"g{i}": p for i, p in enumerate(parts)}
        rows = _rows(log, ddof).with_columns(
            part=pl.col("prompt_id").replace_strict(part_of, return_dtype=pl.Int64)
        )
        common: dict[str, Any] = {
            "ddof": ddof,
            "advantage": pl.col("adv"),
            "batch": ("step",),
            "pass_rates": True,
        }
        for by in ((), ("step",)):
            whole = metrics.finish(metrics.partials(rows, by, **common), by)
            pieces = [
                metrics.partials(rows.filter(pl.col("part") == p), by, **common)
                for p in sorted(set(parts))
            ]
            _assert_same(metrics.finish(metrics.merge(pieces, by), by), whole)
            # merged on the way, one part at a time (as the partitioned engine does)
            folded = functools.reduce(lambda a, b: metrics.merge([a, b], by), pieces)
            _assert_same(metrics.finish(folded, by), whole)
        # split along steps (summarize's pieces of whole steps): each step's row passes
        # through the merge as it is, or merges where the split put a step in two parts
        for split, count in ((pl.col("step") % k, k), ((pl.col("step") + pl.col("part")) % 2, 2)):
            by = ("step",)
            whole = metrics.finish(metrics.partials(rows, by, **common), by)
            split_rows = rows.with_columns(split.alias("by_step"))
            pieces = [
                metrics.partials(split_rows.filter(pl.col("by_step") == p), by, **common)
                for p in range(count)
            ]
            _assert_same(metrics.finish(metrics.merge(pieces, by), by), whole)
            # unsorted (summarize sorts the finished table): the same rows, sorted after
            loose = metrics.finish(metrics.merge(pieces[::-1], by, sort=False), by)
            _assert_same(loose.sort("step"), whole)


def trl_frac_reward_zero_std(groups: list[list[float | None]]) -> float:
    """TRL: per completion, ``isclose(nanstd(group), 0, atol=1e-8)``, averaged over the
    batch (NaN std below two scorable rewards: never close)."""
    flags = []
    for rewards in groups:
        std = trl_nanstd([math.nan if r is None else r for r in rewards])
        flags += [bool(np.isclose(std, 0.0, rtol=1e-5, atol=1e-8))] * len(rewards)
    return sum(flags) / len(flags)


TRL_REWARDS = st.sampled_from([0.0, 1.0, 0.5, 2.0, NEAR, 1.0000001, None])


class TestIndependentTrl:
    @pytest.mark.slow
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        groups=st.lists(st.lists(TRL_REWARDS, min_size=1, max_size=6), min_size=1, max_size=10),
        ddof=st.sampled_from([0, 1]),
    )
    def test_every_path_agrees_with_trl(self, groups: list[list[float | None]], ddof: int) -> None:
        expected = trl_frac_reward_zero_std(groups)
        log = _log([(1, rewards) for rewards in groups])
        assert annotate(log, ddof=ddof).run.frac_reward_zero_std == pytest.approx(expected)
        overall = summarize(log, AdvantageOptions(ddof=ddof)).overall
        assert overall["frac_reward_zero_std"][0] == pytest.approx(expected)
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "log.parquet"
            log.write_parquet(source)
            run = annotate_to_parquet(
                source, Path(folder) / "o.parquet", AdvantageOptions(ddof=ddof), partitions=3
            )
        assert run.frac_reward_zero_std == pytest.approx(expected)

"""The per-group table and the run figures, against hand-computed values."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_cli.jobs.pipeline import annotate
from tests.conftest import make_log


def test_group_table_by_hand(tiny_log: pl.DataFrame) -> None:
    table = annotate(tiny_log).groups
    assert table["prompt_id"].to_list() == ["single", "flat", "with_null", "normal"]
    assert table["size"].to_list() == [1, 3, 4, 4]
    assert table["n_null"].to_list() == [0, 0, 1, 0]
    assert table["mean"].to_list() == [0.7, 1.0, 0.5, 0.5]
    assert table["std"].to_list() == pytest.approx([None, 0.0, 0.5, math.sqrt(1 / 3)])
    assert table["min"].to_list() == [0.7, 1.0, 0.0, 0.0]
    assert table["max"].to_list() == [0.7, 1.0, 1.0, 1.0]
    assert table["zero_std"].to_list() == [False, True, False, False]


def test_group_table_uses_the_runs_ddof(tiny_log: pl.DataFrame) -> None:
    table = annotate(tiny_log, ddof=0).groups
    assert table["std"].to_list() == pytest.approx([0.0, 0.0, math.sqrt(1 / 6), 0.5])
    # A singleton is never a zero-variance group, whatever the ddof.
    assert table["zero_std"].to_list() == [False, True, False, False]


def test_group_table_composite_key() -> None:
    log = pl.DataFrame(
        {"step": [2, 1, 2, 1], "prompt_id": ["p", "p", "p", "q"], "reward": [1.0, 0.0, 1.0, 1.0]}
    )
    table = annotate(log, group_cols=("step", "prompt_id")).groups
    assert table.select("step", "prompt_id", "size").rows() == [
        (2, "p", 2),
        (1, "p", 1),
        (1, "q", 1),
    ]


def test_run_figures_by_hand(tiny_log: pl.DataFrame) -> None:
    nan_row = pl.DataFrame({"prompt_id": ["nan_group", "nan_group"], "reward": [float("nan"), 2.0]})
    log = pl.concat([tiny_log, nan_row])
    run = annotate(log, eps=0.0).run
    valid = [0.7, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 2.0]
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((v - mean) ** 2 for v in valid) / (len(valid) - 1))
    assert run.rows == 14
    assert run.groups == 5
    assert (run.group_size_min, run.group_size_median, run.group_size_max) == (1, 3.0, 4)
    assert run.zero_std_groups == 1
    assert run.zero_std_group_share == pytest.approx(1 / 5)
    assert run.frac_reward_zero_std == pytest.approx(3 / 14)
    assert run.singleton_groups == 2  # "single" and "nan_group" (one valid reward)
    assert run.null_rewards == 2  # a null and a NaN
    assert run.batches == 1
    assert run.reward_mean == pytest.approx(mean)
    assert run.reward_std == pytest.approx(std)
    assert run.advantage_min == pytest.approx(-1.0)
    assert run.advantage_max == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(
        st.tuples(
            st.floats(-1e6, 1e6, allow_nan=False),
            st.integers(1, 9),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_one_zero_spread_rule_everywhere(groups: list[tuple[float, int, bool]]) -> None:
    """The group table's ``zero_std``, the run's ``zero_std_groups`` and the engine's
    exact-0 advantage follow one rule (estimators.zero_spread): two or more valid rewards,
    all equal, whatever the value (0.1 and 1/3 included) and whatever the row order."""
    rows = []
    for index, (value, size, constant) in enumerate(groups):
        for k in range(size):
            reward = value if constant or k == 0 else value + 1.0
            rows.append((f"g{index}", reward))
    frame = pl.DataFrame(rows, schema=["prompt_id", "reward"], orient="row").sample(
        fraction=1.0, shuffle=True, seed=len(rows)
    )
    result = annotate(frame)
    table = result.groups.sort("prompt_id")
    expected = {f"g{i}": size >= 2 and constant for i, (_, size, constant) in enumerate(groups)}
    assert dict(zip(table["prompt_id"], table["zero_std"], strict=True)) == expected
    assert result.run.zero_std_groups == sum(expected.values())
    zero_rows = result.frame.filter(
        pl.col("prompt_id").is_in([k for k, v in expected.items() if v])
    )
    assert (zero_rows["advantage"] == 0.0).all()


def test_every_path_reports_one_group_statistic() -> None:
    """A group's mean and std (and whether it has zero spread) are the same numbers in the
    group table, in ``--with-stats``' columns, in summarize's group table and in the
    spread summarize averages, with constant non-dyadic rewards (0.1) giving exactly 0."""
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.report.summarize import summarize

    log = make_log(
        {
            "flat": [0.1, 0.1, 0.1],
            "thirds": [1 / 3, 2 / 3, 1.0],
            "with_null": [1.0, None, 0.0],
            "single": [0.7],
        }
    )
    expected_std = {"flat": 0.0, "thirds": 1 / 3, "with_null": math.sqrt(0.5), "single": None}
    expected_mean = {"flat": 0.1, "thirds": 2 / 3, "with_null": 0.5, "single": 0.7}
    result = annotate(log, with_stats=True)
    stats = result.frame.group_by("prompt_id", maintain_order=True).first()
    summarized = summarize(log, AdvantageOptions()).group_rows()
    for table, mean, std in (
        (result.groups, "mean", "std"),
        (stats, "group_mean", "group_std"),
        (summarized, "mean", "std"),
    ):
        rows = {r["prompt_id"]: r for r in table.iter_rows(named=True)}
        for key, value in expected_std.items():
            assert rows[key][mean] == pytest.approx(expected_mean[key], abs=1e-15), key
            if value is None:
                assert rows[key][std] is None, key
            else:
                assert rows[key][std] == pytest.approx(value, abs=1e-15), key
        assert rows["flat"][std] == 0.0  # exactly, not a rounding residue
    # the mean over the rows of groups with a std (the null reward's row included)
    group_reward_std = summarize(log, AdvantageOptions()).overall["group_reward_std"][0]
    assert group_reward_std == pytest.approx((3 * 1 / 3 + 3 * math.sqrt(0.5)) / 9, abs=1e-12)

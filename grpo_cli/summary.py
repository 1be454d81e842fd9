"""Summary tables of a reward log, as Polars frames and plain dataclasses (no Rich here).

Definitions (the README repeats them). The reward is the one the estimator saw (the
weighted sum of several reward columns; for ``process``, every step reward).

- ``size``: rows (responses) in the group; ``n_null``: null or NaN rewards.
- ``mean``, ``std`` (with the run's ddof), ``min``, ``max``: over the valid rewards.
- ``zero_std``: the group has at least two valid rewards and they are all equal (its
  variance is exactly 0; see ``EstimatorContext.is_constant``).
- ``frac_reward_zero_std`` (TRL's metric): the share of *responses* whose group is zero_std.
- a singleton group has exactly one valid reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import polars as pl

from grpo_cli.compute import (
    CONSTANT_KEY,
    POSITION_KEY,
    REWARD_KEY,
    ROW_KEY,
    SIZE_KEY,
    VALID_KEY,
    Keys,
    collect,
    reward_expr,
)
from grpo_cli.layouts import UID_GROUP
from grpo_cli.options import AdvantageOptions

GROUP_TABLE_COLUMNS: Final = ("size", "n_null", "mean", "std", "min", "max", "zero_std")
DISPLAY_NAMES: Final = {POSITION_KEY: "group_index", UID_GROUP: "group"}


def reward_units(frame: pl.LazyFrame, options: AdvantageOptions) -> pl.LazyFrame:
    """One row per reward the estimator saw, with ROW_KEY (the response) and REWARD_KEY."""
    if options.estimator == "process" and options.step_rewards_col:
        column = options.step_rewards_col
        return (
            frame.with_row_index(ROW_KEY)
            .explode(column)
            .with_columns(reward_expr(column, options.nulls).alias(REWARD_KEY))
        )
    return frame.with_row_index(ROW_KEY)


def group_table(
    annotated: pl.LazyFrame,
    options: AdvantageOptions,
    keys: Keys,
    extra: Sequence[pl.Expr] = (),
) -> pl.DataFrame:
    """One row per group, in order of first appearance: keys, then GROUP_TABLE_COLUMNS, then
    the ``extra`` aggregations (named expressions) in the same grouping.

    ``annotated`` is :func:`grpo_cli.compute.annotate_lazy`'s frame (with its key columns).
    Temporary key columns get readable names (``group_index``, ``group``).
    """
    r = pl.col(REWARD_KEY)
    firsts = [pl.col(c).first() for c in keys.exact] if keys.hashed else []
    process = options.estimator == "process"
    size = pl.col(ROW_KEY).n_unique() if process else pl.len()
    units = reward_units(annotated, options) if process else annotated
    table = (
        units.group_by(list(keys.group), maintain_order=True)
        .agg(
            *firsts,
            size.cast(pl.Int64).alias("size"),
            r.is_null().sum().cast(pl.Int64).alias("n_null"),
            r.mean().alias("mean"),
            r.std(ddof=options.ddof).alias("std"),
            r.min().alias("min"),
            r.max().alias("max"),
            r.count().alias("valid"),
            *extra,
        )
        .with_columns(zero_std=(pl.col("valid") >= 2) & (pl.col("std") == 0.0))
        .select(*keys.exact, *GROUP_TABLE_COLUMNS, *(e.meta.output_name() for e in extra))
    )
    renames = {k: DISPLAY_NAMES[k] for k in keys.exact if k in DISPLAY_NAMES}
    return collect(table.rename(renames), deterministic=options.deterministic)


@dataclass(frozen=True)
class RunSummary:
    """Figures of one computation, for the terminal summary."""

    rows: int
    groups: int
    batches: int
    group_size_min: int
    group_size_median: float
    group_size_max: int
    zero_std_groups: int
    zero_std_group_share: float
    frac_reward_zero_std: float
    singleton_groups: int
    null_rewards: int
    reward_mean: float | None
    reward_std: float | None
    advantage_min: float | None
    advantage_max: float | None


def summarize_run(annotated: pl.LazyFrame, options: AdvantageOptions, keys: Keys) -> RunSummary:
    """Overall figures of an annotated frame (with its key and profile columns).

    Group figures come from each row's group size, valid count and zero-variance flag
    (``compute.profile_columns``): a group of size s contributes 1/s from each of its rows,
    so no second grouping of the key is needed. ``reward_std`` is the std of all valid
    rewards with ddof 1, as TRL logs ``reward_std``.
    """
    if SIZE_KEY not in annotated.collect_schema():
        return _summarize_from_groups(
            annotated, group_table(annotated, options, keys), options, keys
        )
    r = pl.col(REWARD_KEY)
    adv = pl.col(options.advantage_col)
    size = pl.col(SIZE_KEY)
    share = 1.0 / size.cast(pl.Float64)
    figures = collect(
        annotated.select(
            rows=pl.len(),
            batches=pl.struct(list(keys.batch)).n_unique(),
            groups=share.sum(),
            size_min=size.min(),
            size_max=size.max(),
            zero_std_groups=share.filter(pl.col(CONSTANT_KEY)).sum(),
            zero_std_rows=pl.col(CONSTANT_KEY).sum(),
            singleton_groups=share.filter(pl.col(VALID_KEY) == 1).sum(),
            null_rewards=r.is_null().sum(),
            reward_mean=r.mean(),
            reward_std=r.std(ddof=1),
            advantage_min=adv.min(),
            advantage_max=adv.max(),
        ),
        deterministic=options.deterministic,
    ).row(0, named=True)
    # Median group size: sizes weighted by their number of groups (rows / size).
    by_size = collect(annotated.group_by(SIZE_KEY).agg(n=pl.len()).sort(SIZE_KEY))
    median = _weighted_median(
        by_size[SIZE_KEY].to_list(),
        [n // s for n, s in zip(by_size["n"].to_list(), by_size[SIZE_KEY].to_list(), strict=True)],
    )
    n_groups = round(figures["groups"] or 0)
    rows = int(figures["rows"])
    zero_std_groups = round(figures["zero_std_groups"] or 0)
    return RunSummary(
        rows=rows,
        groups=n_groups,
        batches=int(figures["batches"]),
        group_size_min=int(figures["size_min"] or 0),
        group_size_median=median,
        group_size_max=int(figures["size_max"] or 0),
        zero_std_groups=zero_std_groups,
        zero_std_group_share=zero_std_groups / n_groups if n_groups else 0.0,
        frac_reward_zero_std=int(figures["zero_std_rows"]) / rows if rows else 0.0,
        singleton_groups=round(figures["singleton_groups"] or 0),
        null_rewards=int(figures["null_rewards"]),
        reward_mean=figures["reward_mean"],
        reward_std=figures["reward_std"],
        advantage_min=figures["advantage_min"],
        advantage_max=figures["advantage_max"],
    )


def _weighted_median(values: list[int], counts: list[int]) -> float:
    """The median of a multiset given as sorted values and their counts (mean of the two
    middle elements for an even total, as Polars' median)."""
    total = sum(counts)
    if total == 0:
        return 0.0
    middle = [(total - 1) // 2, total // 2]
    found: list[int] = []
    seen = 0
    for value, count in zip(values, counts, strict=True):
        while len(found) < 2 and middle[len(found)] < seen + count:
            found.append(value)
        seen += count
    return (found[0] + found[1]) / 2


def _summarize_from_groups(
    annotated: pl.LazyFrame, groups: pl.DataFrame, options: AdvantageOptions, keys: Keys
) -> RunSummary:
    """Overall figures from the per-group table (process supervision's exploded steps)."""
    r = pl.col(REWARD_KEY)
    adv = pl.col(options.advantage_col)
    if options.estimator == "process":
        adv = adv.explode()
    overall = collect(
        reward_units(annotated, options).select(
            null_rewards=r.is_null().sum(),
            reward_mean=r.mean(),
            reward_std=r.std(ddof=1),
        ),
        deterministic=options.deterministic,
    ).row(0, named=True)
    per_row = collect(
        annotated.select(
            rows=pl.len(),
            batches=pl.struct(list(keys.batch)).n_unique(),
            advantage_min=adv.min(),
            advantage_max=adv.max(),
        )
    ).row(0, named=True)
    valid = pl.col("size") - pl.col("n_null")
    per_group = groups.select(
        groups=pl.len(),
        size_min=pl.col("size").min(),
        size_median=pl.col("size").median(),
        size_max=pl.col("size").max(),
        zero_std_groups=pl.col("zero_std").sum(),
        zero_std_rows=pl.col("size").filter(pl.col("zero_std")).sum(),
        singleton_groups=(valid == 1).sum(),
    ).row(0, named=True)
    n_groups = int(per_group["groups"])
    rows = int(per_row["rows"])
    return RunSummary(
        rows=rows,
        groups=n_groups,
        batches=int(per_row["batches"]),
        group_size_min=int(per_group["size_min"] or 0),
        group_size_median=float(per_group["size_median"] or 0),
        group_size_max=int(per_group["size_max"] or 0),
        zero_std_groups=int(per_group["zero_std_groups"]),
        zero_std_group_share=per_group["zero_std_groups"] / n_groups if n_groups else 0.0,
        frac_reward_zero_std=per_group["zero_std_rows"] / rows if rows else 0.0,
        singleton_groups=int(per_group["singleton_groups"]),
        null_rewards=int(overall["null_rewards"]),
        reward_mean=overall["reward_mean"],
        reward_std=overall["reward_std"],
        advantage_min=per_row["advantage_min"],
        advantage_max=per_row["advantage_max"],
    )

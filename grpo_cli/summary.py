"""Summary tables of a reward log, as Polars frames and plain dataclasses (no Rich here).

Definitions (the README repeats them):

- ``size``: rows in the group; ``n_null``: rows whose reward is null or NaN.
- ``mean``, ``std`` (with the run's ddof), ``min``, ``max``: over the valid rewards.
- ``zero_std``: the group has at least two valid rewards and they are all equal.
- ``frac_reward_zero_std`` (TRL's metric): the share of *responses* whose group is zero_std.
- a singleton group has exactly one valid reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from grpo_cli.compute import reward_expr
from grpo_cli.options import AdvantageOptions

GROUP_TABLE_COLUMNS = ("size", "n_null", "mean", "std", "min", "max", "zero_std")


def group_table(frame: pl.DataFrame, options: AdvantageOptions) -> pl.DataFrame:
    """One row per group, in order of first appearance: keys, then GROUP_TABLE_COLUMNS."""
    r = reward_expr(options.reward_col)
    return (
        frame.lazy()
        .group_by(list(options.group_cols), maintain_order=True)
        .agg(
            size=pl.len().cast(pl.Int64),
            n_null=r.is_null().sum().cast(pl.Int64),
            mean=r.mean(),
            std=r.std(ddof=options.ddof),
            min=r.min(),
            max=r.max(),
        )
        .with_columns(
            zero_std=((pl.col("size") - pl.col("n_null")) >= 2) & (pl.col("max") == pl.col("min"))
        )
        .collect(engine="in-memory")
    )


@dataclass(frozen=True)
class RunSummary:
    """Figures of one computation, for the terminal summary."""

    rows: int
    groups: int
    group_size_min: int
    group_size_median: float
    group_size_max: int
    zero_std_groups: int
    zero_std_group_share: float
    frac_reward_zero_std: float
    singleton_groups: int
    null_rewards: int
    nan_rewards: int
    reward_mean: float | None
    reward_std: float | None
    advantage_min: float | None
    advantage_max: float | None


def summarize_run(
    annotated: pl.DataFrame, groups: pl.DataFrame, options: AdvantageOptions
) -> RunSummary:
    """Overall figures from an annotated frame and its :func:`group_table`.

    ``reward_std`` is the std of all valid rewards with ddof 1, as TRL logs ``reward_std``.
    """
    raw = pl.col(options.reward_col)
    r = reward_expr(options.reward_col)
    is_float = annotated.schema[options.reward_col].is_float()
    adv = pl.col(options.advantage_col)
    overall = annotated.select(
        rows=pl.len(),
        null_rewards=r.is_null().sum(),
        nan_rewards=raw.is_nan().sum() if is_float else pl.lit(0),
        reward_mean=r.mean(),
        reward_std=r.std(ddof=1),
        advantage_min=adv.min(),
        advantage_max=adv.max(),
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
    rows = int(overall["rows"])
    return RunSummary(
        rows=rows,
        groups=n_groups,
        group_size_min=int(per_group["size_min"]),
        group_size_median=float(per_group["size_median"]),
        group_size_max=int(per_group["size_max"]),
        zero_std_groups=int(per_group["zero_std_groups"]),
        zero_std_group_share=per_group["zero_std_groups"] / n_groups if n_groups else 0.0,
        frac_reward_zero_std=per_group["zero_std_rows"] / rows if rows else 0.0,
        singleton_groups=int(per_group["singleton_groups"]),
        null_rewards=int(overall["null_rewards"]),
        nan_rewards=int(overall["nan_rewards"]),
        reward_mean=overall["reward_mean"],
        reward_std=overall["reward_std"],
        advantage_min=overall["advantage_min"],
        advantage_max=overall["advantage_max"],
    )

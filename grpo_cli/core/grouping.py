"""Every statistic of a group, defined once, over its *valid* rewards (not null, not
NaN): ``count``, ``mean`` and ``var`` (the run's ddof; null below ddof + 1 valid rewards),
the engines' one grouping pass (:func:`group_stat_columns`); the *profile* the run's
figures read (rows, valid rewards, mean, var: :func:`_profile`); the ``--with-stats``
columns (:func:`stats_columns`); and the one zero-spread rule (:func:`zero_spread`).
Polars is imported inside the functions (the estimator registry reads ``zero_spread``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from grpo_cli.core.columns import (
    CONSTANT_KEY,
    REWARD_KEY,
    SIZE_KEY,
    STAT_COUNT,
    STAT_MEAN,
    STAT_VAR,
    VALID_KEY,
)

if TYPE_CHECKING:
    import polars as pl

STAT_COLUMNS: Final = {"count": STAT_COUNT, "mean": STAT_MEAN, "var": STAT_VAR}
PROFILE_COLUMNS: Final = (SIZE_KEY, VALID_KEY, STAT_MEAN, STAT_VAR)

# A per-row column as an engine holds it: a Polars expression or a float64 torch tensor.
Value = Any


def zero_spread(valid: Value, var: Value) -> Value:
    """The one zero-spread rule, for every engine, table and figure: at least two valid
    rewards (``valid``) and a variance (``var``, any ddof) of exactly 0, i.e. every valid
    reward equal. Polars' (Welford) variance is exactly 0 on equal values (any values, any
    order; a test checks it); rewards differing by less than about 1e-154 (their squared
    differences underflow) count as equal, as they would for TRL's ``isclose(std, 0)``.
    A group under it gets advantage 0 (never a rounding residue); ``zero_std`` in the
    group table and ``zero_std_groups`` count it."""
    return (valid >= 2) & (var == 0.0)


def group_stat_columns(reward: pl.Expr, group_keys: Sequence[str], ddof: int) -> list[pl.Expr]:
    """The per-row group statistics of ``reward`` (``STAT_COLUMNS``: count, mean, var) as
    plain window columns: in one ``with_columns`` they share one grouping pass (nested in
    other expressions, Polars may split them over several passes)."""
    keys = list(group_keys)
    return [
        reward.count().over(keys).alias(STAT_COUNT),
        reward.mean().over(keys).alias(STAT_MEAN),
        reward.var(ddof=ddof).over(keys).alias(STAT_VAR),
    ]


def _profile(reward: pl.Expr | None, ddof: int, size: pl.Expr | None = None) -> dict[str, pl.Expr]:
    """The profile's aggregates over one group's rows (``reward``: default REWARD_KEY;
    ``size``: its rows, default ``pl.len()``)."""
    import polars as pl

    reward = pl.col(REWARD_KEY) if reward is None else reward
    rows = pl.len() if size is None else size
    return {
        SIZE_KEY: rows.cast(pl.Int64),
        VALID_KEY: reward.count().cast(pl.Int64),
        STAT_MEAN: reward.mean(),
        STAT_VAR: reward.var(ddof=ddof),
    }


def row_profile(has_nulls: bool) -> list[pl.Expr]:
    """Per row, its group's size, valid rewards and zero spread, from the columns of
    :func:`group_stat_columns` (and, when the reward may be null, the group's row count
    in ``SIZE_KEY``; without nulls it is the valid count): no second grouping."""
    import polars as pl

    valid = pl.col(STAT_COUNT).cast(pl.Int64)
    size = pl.col(SIZE_KEY).cast(pl.Int64) if has_nulls else valid
    constant = zero_spread(pl.col(STAT_COUNT), pl.col(STAT_VAR))
    return [size.alias(SIZE_KEY), valid.alias(VALID_KEY), constant.alias(CONSTANT_KEY)]


def profile_windows(
    group: Sequence[str], ddof: int, reward: pl.Expr | None = None
) -> list[pl.Expr]:
    """The profile (``PROFILE_COLUMNS``) as window columns over ``group``, for a frame
    that carries no group statistics (one grouping pass); ``reward`` defaults to
    ``REWARD_KEY``."""
    keys = list(group)
    return [expr.over(keys).alias(name) for name, expr in _profile(reward, ddof).items()]


def with_profile(
    frame: pl.LazyFrame, group: Sequence[str], ddof: int, reward: pl.Expr | None = None
) -> pl.LazyFrame:
    """``frame`` with the profile columns it lacks (an engine that computes no group
    statistics columns, such as the torch engine), as windows over ``group``."""
    names = frame.collect_schema().names()
    missing = [
        column
        for column in profile_windows(group, ddof, reward)
        if column.meta.output_name() not in names
    ]
    return frame.with_columns(missing) if missing else frame


def profile_aggregations(
    ddof: int, reward: pl.Expr | None = None, size: pl.Expr | None = None
) -> list[pl.Expr]:
    """The profile (``PROFILE_COLUMNS``) as aggregations, for one row per group
    (``size``: how the group's rows are counted; default its rows)."""
    return [expr.alias(name) for name, expr in _profile(reward, ddof, size).items()]


def stats_columns(
    group: Sequence[str], ddof: int, *, precomputed: bool, has_nulls: bool = True
) -> list[pl.Expr]:
    """compute's ``--with-stats`` columns: ``group_size`` (the group's rows, from
    ``SIZE_KEY``, or without nulls its valid count), ``group_mean`` and ``group_std``
    (``sqrt(var)`` with ``ddof``) of the valid rewards (``REWARD_KEY``); ``precomputed``:
    from the columns of :func:`group_stat_columns`, else as windows over ``group``."""
    import polars as pl

    if precomputed:
        size = pl.col(SIZE_KEY) if has_nulls else pl.col(STAT_COUNT)
        mean, var = pl.col(STAT_MEAN), pl.col(STAT_VAR)
    else:
        keys, r = list(group), pl.col(REWARD_KEY)
        size = pl.col(SIZE_KEY)
        mean, var = r.mean().over(keys), r.var(ddof=ddof).over(keys)
    return [
        size.cast(pl.Int64).alias("group_size"),
        mean.alias("group_mean"),
        var.sqrt().alias("group_std"),
    ]

"""Every run figure, defined once, as partial aggregates that merge.

- :func:`partials`: per value of ``by`` (or one row overall), counts and sums, the reward's
  count, mean and sum of squared deviations, minima and maxima, a histogram of group sizes
  and the distinct batch values of a set of rows.
- :func:`merge`: the partials of disjoint sets of rows, each group whole in one set: sums
  add, extrema combine, moments merge by Chan et al.'s formula, histograms add, batch
  values unite.
- :func:`finish`: the figures, under the names the trainers log them.

The rows carry their group's profile (:mod:`grpo_cli.core.grouping`): ``REWARD_KEY`` (null:
no valid reward), ``SIZE_KEY`` (rows), ``VALID_KEY`` (valid rewards) and the group's reward
mean and variance with the run's ddof (``STAT_COLUMNS``). The figures:

- ``responses``: rows. ``groups``: groups with a row there. ``group_size_min``,
  ``group_size_median`` (the mean of the two middle sizes for an even count),
  ``group_size_max``.
- ``reward``, ``reward_std`` (ddof 1, null below two), ``reward_min``, ``reward_max``: over
  the valid rewards (TRL ``reward``/``reward_std``; verl ``critic/score/*``).
- ``frac_reward_zero_std`` (TRL): the share of responses whose group std (ddof 1 whatever
  the run's ddof: :func:`group_std`) is ``isclose(std, 0)`` (atol 1e-8); a group below two
  valid rewards never counts; a null reward's response counts with its group. Rewards 1.0
  and 1.000000001 count, unlike for the exact zero_std_groups.
- ``group_reward_std`` (OpenRLHF): mean over responses of their group's std (ddof 1),
  groups below two valid rewards left out.
- ``zero_std_groups``: groups with at least two valid rewards, all exactly equal;
  ``zero_std_group_share``: their share of the groups. ``singleton_groups``: groups with
  exactly one valid reward. ``null_rewards``: null or NaN rewards. ``batches``: distinct
  batch values (with ``batch``).
- With ``pass_rates`` (binary rewards): ``zero_std_solved`` / ``zero_std_failed``, the
  zero-variance groups with every reward 1 / 0; ``pass_at_n``, the share of groups with a
  valid reward whose mean is above 0 (OpenRLHF ``pass{n}``); ``pass_at_1``, the mean of
  those groups' means (OpenRLHF ``pass1``).
- With ``advantage``: ``advantage_mean``, ``advantage_min``, ``advantage_max`` (NaN as
  null), ``frac_zero_advantage`` (exactly 0).

Partial columns have plain names (``rows``, ``reward_m2``...); :func:`partials` refuses a
``by`` column named as a partial or a figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import polars as pl

from grpo_cli.core.columns import REWARD_KEY, SIZE_KEY, VALID_KEY, batch_stat_column
from grpo_cli.core.errors import OptionsError
from grpo_cli.core.grouping import STAT_COLUMNS, zero_spread

ZERO_STD_ATOL: Final = 1e-8  # torch.isclose's default atol, as TRL uses it
GROUP_MEAN: Final = STAT_COLUMNS["mean"]
GROUP_VAR: Final = STAT_COLUMNS["var"]

# ------------------------------------------------------------------ partial columns
ROWS: Final = "rows"
NULL_REWARDS: Final = "null_rewards"
REWARD_N: Final = "reward_n"
REWARD_MEAN: Final = "reward_mean"
REWARD_M2: Final = "reward_m2"  # sum of squared deviations from reward_mean
REWARD_MIN: Final = "reward_min"
REWARD_MAX: Final = "reward_max"
ZERO_STD_ROWS: Final = "zero_std_rows"  # rows whose group std (ddof 1) is <= 1e-8
STD_SUM: Final = "group_std_sum"  # sum over rows of their group std (ddof 1), where defined
STD_ROWS: Final = "group_std_rows"  # rows whose group std is defined
SIZE_MIN: Final = "size_min"
SIZE_MAX: Final = "size_max"
GROUPS: Final = "groups"
ZERO_STD_GROUPS: Final = "zero_std_groups"
SINGLETON_GROUPS: Final = "singleton_groups"
SCORED_GROUPS: Final = "scored_groups"  # groups with a valid reward
PASSING_GROUPS: Final = "passing_groups"  # ... and a success (group mean above 0)
SOLVED_GROUPS: Final = "zero_std_solved"  # binary: zero-variance groups, every reward 1
FAILED_GROUPS: Final = "zero_std_failed"  # binary: zero-variance groups, every reward 0
GROUP_MEAN_SUM: Final = "group_mean_sum"  # sum of the scored groups' means
ADV_N: Final = "advantage_n"
ADV_MEAN: Final = "advantage_mean"
ADV_MIN: Final = "advantage_min"
ADV_MAX: Final = "advantage_max"
ADV_ZERO: Final = "zero_advantages"
BATCH_VALUES: Final = "batch_values"  # the distinct batch values, a list
SIZE_HIST: Final = "size_hist"  # list of {size, groups}, sorted by size, one entry a size

# Partials counted per group (summarize's overall table takes them from one row per group).
GROUP_SUMS: Final = (
    GROUPS,
    ZERO_STD_GROUPS,
    SINGLETON_GROUPS,
    SCORED_GROUPS,
    PASSING_GROUPS,
    SOLVED_GROUPS,
    FAILED_GROUPS,
    GROUP_MEAN_SUM,
)
GROUP_PARTIALS: Final = (*GROUP_SUMS, SIZE_HIST)
SUMS: Final = (ROWS, NULL_REWARDS, ZERO_STD_ROWS, STD_SUM, STD_ROWS, ADV_ZERO, *GROUP_SUMS)
MINIMA: Final = (SIZE_MIN, ADV_MIN, REWARD_MIN)
MAXIMA: Final = (SIZE_MAX, ADV_MAX, REWARD_MAX)
MOMENTS: Final = (REWARD_N, REWARD_MEAN, REWARD_M2, ADV_N, ADV_MEAN)
PARTIALS: Final = (*SUMS, *MINIMA, *MAXIMA, *MOMENTS, BATCH_VALUES, SIZE_HIST)

# ------------------------------------------------------------------ finished figures
FIGURES: Final = (
    "responses",
    "groups",
    "group_size_min",
    "group_size_median",
    "group_size_max",
    "reward",
    "reward_std",
    "reward_min",
    "reward_max",
    "frac_reward_zero_std",
    "group_reward_std",
    "zero_std_groups",
    "zero_std_group_share",
    "zero_std_solved",
    "zero_std_failed",
    "singleton_groups",
    "null_rewards",
    "batches",
    "pass_at_n",
    "pass_at_1",
    "advantage_mean",
    "advantage_min",
    "advantage_max",
    "frac_zero_advantage",
)

_SIZE: Final = "size"  # fields of a SIZE_HIST entry
_COUNT: Final = "groups"


# ------------------------------------------------------------------ per-row profile
def group_std(ddof: int) -> pl.Expr:
    """Per row, its group's reward std with ddof 1 (TRL's ``nanstd``), from the group's
    valid count n and variance with the run's ``ddof`` d: ``var_d (n - d) / (n - 1)``;
    null below two valid rewards (where TRL's is NaN)."""
    n = pl.col(VALID_KEY)
    var = pl.col(GROUP_VAR)
    var1 = var if ddof == 1 else var * (n - ddof) / (n - 1)
    return pl.when(n >= 2).then(var1.sqrt())


# ------------------------------------------------------------------ partials
def partials(
    rows: pl.LazyFrame | pl.DataFrame,
    by: Sequence[str] = (),
    *,
    ddof: int = 1,
    groups: pl.LazyFrame | pl.DataFrame | None = None,
    rewards: pl.LazyFrame | pl.DataFrame | None = None,
    advantage: pl.Expr | None = None,
    batch: Sequence[str] = (),
    pass_rates: bool = False,
    deterministic: bool = True,
    reduce: bool = True,
) -> pl.DataFrame:
    """The partials of ``rows`` per value of ``by`` (one row when ``by`` is empty).

    Args:
        rows: one row per response, with its group's profile and the ``by``, ``batch`` and
            advantage columns; without ``groups``, each group whole in one value of ``by``.
        ddof: the ddof of the profile's group variance.
        groups: one row per (value of ``by``, group) with the group's profile, when groups
            may span values of ``by`` (each counted in every value where it has rows).
        rewards: one row per reward (``REWARD_KEY``) when a response has several (process
            supervision); the reward figures come from it.
        advantage: the advantage (an expression over ``rows``).
        batch: the batch key columns (the ``batches`` figure).
        pass_rates: add the pass@n / pass@1 partials (binary rewards).
        deterministic: collect with the in-memory engine.
        reduce: merge to one row per value of ``by``; else several rows per value (also
            partials), for callers that merge many parts anyway.
    """
    by = list(by)
    clash = sorted(set(by) & {*PARTIALS, *FIGURES, _SIZE, SIZE_KEY})
    if clash:
        raise OptionsError(
            f"cannot compute figures per {clash[0]!r}: it is the name of a figure",
            hint="rename the column first",
        )
    aggs = _row_aggs(ddof, advantage, batch, grouped=bool(by))
    if rewards is None:
        aggs += _reward_aggs()
    if groups is None:  # groups from the rows
        aggs += _group_aggs(pass_rates, per_row=True)
        parts = [_aggregate(rows.lazy(), by, aggs), _size_hist(rows.lazy(), by, per_row=True)]
    else:
        counted = _aggregate(groups.lazy(), by, _group_aggs(pass_rates, per_row=False))
        hist = _size_hist(groups.lazy(), by, per_row=False)
        parts = [_aggregate(rows.lazy(), by, aggs), counted, hist]
    if rewards is not None:
        parts.append(_aggregate(rewards.lazy(), by, _reward_aggs()))
    both = pl.concat(parts, how="diagonal")
    result = _merge(both, by) if reduce else both
    return result.collect(engine="in-memory" if deterministic else "streaming")


def group_partials(
    groups: pl.LazyFrame | pl.DataFrame, *, pass_rates: bool = False
) -> pl.DataFrame:
    """The partials counted per group (``GROUP_PARTIALS``) of one row per group with its
    profile."""
    lazy = groups.lazy()
    counted = _aggregate(lazy, [], _group_aggs(pass_rates, per_row=False))
    both = pl.concat([counted, _size_hist(lazy, [], per_row=False)], how="diagonal")
    return _merge(both, []).collect()


def _aggregate(frame: pl.LazyFrame, by: list[str], aggs: list[pl.Expr]) -> pl.LazyFrame:
    return frame.group_by(by).agg(aggs) if by else frame.select(aggs)


def _row_aggs(
    ddof: int, advantage: pl.Expr | None, batch: Sequence[str], *, grouped: bool
) -> list[pl.Expr]:
    std = group_std(ddof)
    size = pl.col(SIZE_KEY).cast(pl.Int64)
    aggs = [
        pl.len().cast(pl.Int64).alias(ROWS),
        (std <= ZERO_STD_ATOL).fill_null(False).sum().cast(pl.Int64).alias(ZERO_STD_ROWS),
        std.sum().alias(STD_SUM),
        std.count().cast(pl.Int64).alias(STD_ROWS),
        size.min().alias(SIZE_MIN),
        size.max().alias(SIZE_MAX),
    ]
    if advantage is not None:
        a = advantage.cast(pl.Float64).fill_nan(None)
        aggs += [
            a.count().cast(pl.Int64).alias(ADV_N),
            a.mean().alias(ADV_MEAN),
            a.min().alias(ADV_MIN),
            a.max().alias(ADV_MAX),
            (a == 0.0).sum().cast(pl.Int64).alias(ADV_ZERO),
        ]
    if batch:
        value = pl.col(batch[0]) if len(batch) == 1 else pl.struct(list(batch))
        values = value.unique()
        aggs.append((values if grouped else values.implode()).alias(BATCH_VALUES))
    return aggs


def _reward_aggs() -> list[pl.Expr]:
    r = pl.col(REWARD_KEY)
    n = r.count()
    return [
        n.cast(pl.Int64).alias(REWARD_N),
        r.mean().alias(REWARD_MEAN),
        (r.var(ddof=0) * n).fill_null(0.0).alias(REWARD_M2),
        r.min().alias(REWARD_MIN),
        r.max().alias(REWARD_MAX),
        r.is_null().sum().cast(pl.Int64).alias(NULL_REWARDS),
    ]


def _group_aggs(pass_rates: bool, *, per_row: bool) -> list[pl.Expr]:
    """The groups' counts: ``per_row``, over rows each weighing 1/size (rounded to exact
    counts, every group being whole); else over one row per group."""
    size = pl.col(SIZE_KEY).cast(pl.Float64)
    valid = pl.col(VALID_KEY)
    constant: pl.Expr = zero_spread(valid, pl.col(GROUP_VAR))

    def groups(flag: pl.Expr) -> pl.Expr:
        if not per_row:
            return flag.sum().cast(pl.Int64)
        return (flag.cast(pl.Float64) / size).sum().round().cast(pl.Int64)

    aggs = [
        groups(constant).alias(ZERO_STD_GROUPS),
        groups(valid == 1).alias(SINGLETON_GROUPS),
    ]
    if pass_rates:
        scored = valid >= 1
        means = pl.col(GROUP_MEAN).filter(scored)
        aggs += [
            groups(scored).alias(SCORED_GROUPS),
            groups(scored & (pl.col(GROUP_MEAN) > 0.0)).alias(PASSING_GROUPS),
            groups(constant & (pl.col(GROUP_MEAN) == 1.0)).alias(SOLVED_GROUPS),
            groups(constant & (pl.col(GROUP_MEAN) == 0.0)).alias(FAILED_GROUPS),
            (means / size.filter(scored) if per_row else means).sum().alias(GROUP_MEAN_SUM),
        ]
    return aggs


def _size_hist(frame: pl.LazyFrame, by: list[str], *, per_row: bool) -> pl.LazyFrame:
    """Groups and their one-entry size histogram, per (value of ``by``, group size), from
    rows (``per_row``: s rows per group of size s) or one row per group."""
    size = pl.col(SIZE_KEY).first().cast(pl.Int64)
    count = pl.len().cast(pl.Int64)
    groups = count // size if per_row else count
    entry = pl.struct(size.alias(_SIZE), groups.alias(_COUNT)).implode()
    bucket = frame.group_by([*by, SIZE_KEY]).agg(groups.alias(GROUPS), entry.alias(SIZE_HIST))
    return bucket.drop(SIZE_KEY)


# ------------------------------------------------------------------ merge
def merge(
    parts: pl.DataFrame | Iterable[pl.DataFrame], by: Sequence[str] = (), *, sort: bool = True
) -> pl.DataFrame:
    """The partials of the union of disjoint sets of rows (each group whole in one), one
    row per value of ``by``, sorted by ``by`` (``sort=False``: in no stated order, for a
    caller that sorts what it finishes from them, a narrower table); a partial missing from
    a part (null) counts as empty. A value of ``by`` found in one part only keeps that
    part's row as it is (the partials of one part are already its merged partials:
    :func:`finish` reads either), so that parts of disjoint ``by`` values (a big log's
    pieces of whole steps) are merged by concatenation: the aggregation costs memory and
    time per row merged."""
    frame = parts if isinstance(parts, pl.DataFrame) else pl.concat(parts, how="diagonal")
    if not by:
        return _merge(frame.lazy(), []).collect()
    key = pl.col(by[0]) if len(by) == 1 else pl.struct(list(by))
    once = frame.select(key.is_unique()).to_series()
    if once.all():
        return frame.sort(list(by)) if sort else frame
    merged = _merge(frame.filter(~once).lazy(), list(by)).collect()
    frame = pl.concat([merged, frame.filter(once)], how="diagonal_relaxed")
    return frame.sort(list(by)) if sort else frame


def _merge(frame: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    names = frame.collect_schema().names()
    grouped = bool(by)
    aggs: list[pl.Expr] = []
    for name in names:
        column = pl.col(name)
        if name in SUMS:
            aggs.append(column.sum())
        elif name in MINIMA:
            aggs.append(column.min())
        elif name in MAXIMA:
            aggs.append(column.max())
        elif name == BATCH_VALUES:
            union = column.explode().drop_nulls().unique().sort()
            aggs.append(union if grouped else union.implode())
    if REWARD_N in names:
        aggs += _chan(REWARD_N, REWARD_MEAN, REWARD_M2)
    if ADV_N in names:
        aggs += _chan(ADV_N, ADV_MEAN)
    merged = _aggregate(frame, by, aggs)
    if SIZE_HIST in names:
        hist = _merge_hist(frame, by)
        merged = (
            merged.join(hist, on=by, how="left", nulls_equal=True)
            if by
            else merged.join(hist, how="cross")
        )
    return merged.sort(by) if by else merged


def _chan(count: str, mean: str, m2: str | None = None) -> list[pl.Expr]:
    """Count, mean (and sum of squared deviations) of the union: Chan et al.'s parallel
    formula, k parts at once, about the first part's mean c (one part comes back exactly):
    mean = c + sum n_i (mean_i - c) / n, M2 = sum M2_i + sum n_i (mean_i - mean)^2."""
    n = pl.col(count).fill_null(0)
    total = n.sum()
    part_mean = pl.col(mean)
    c = part_mean.filter(n > 0).first()
    merged = c + (n * (part_mean - c)).filter(n > 0).sum() / total
    out = [total.alias(count), pl.when(total > 0).then(merged).alias(mean)]
    if m2 is not None:
        spread = (n * (part_mean - merged) ** 2).filter(n > 0).sum()
        moment = pl.col(m2).fill_null(0.0).sum() + spread
        out.append(pl.when(total > 0).then(moment).otherwise(0.0).alias(m2))
    return out


def _merge_hist(frame: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Size histograms added size by size, sorted by size."""
    entries = (
        frame.select(*by, SIZE_HIST)
        .explode(SIZE_HIST)
        .drop_nulls(SIZE_HIST)
        .unnest(SIZE_HIST)
        .group_by([*by, _SIZE])
        .agg(pl.col(_COUNT).sum())
        .filter(pl.col(_COUNT) > 0)
        .sort([*by, _SIZE])
    )
    entry = pl.struct(_SIZE, _COUNT)
    if by:
        return entries.group_by(by, maintain_order=True).agg(entry.alias(SIZE_HIST))
    return entries.select(entry.implode().alias(SIZE_HIST))


# ------------------------------------------------------------------ finish
def finish(merged: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """The figures (``FIGURES``, those the partials allow) of merged partials, one row
    per row of ``merged``, after its ``by`` columns."""
    names = merged.columns
    rows = pl.col(ROWS)
    groups = pl.col(GROUPS)
    n = pl.col(REWARD_N)

    def ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
        return pl.when(den > 0).then(num / den)

    figures: dict[str, pl.Expr] = {
        "responses": rows,
        "groups": groups,
        "group_size_min": pl.col(SIZE_MIN),
        "group_size_median": _median(),
        "group_size_max": pl.col(SIZE_MAX),
        "reward": pl.when(n > 0).then(pl.col(REWARD_MEAN)),
        "reward_std": pl.when(n > 1).then((pl.col(REWARD_M2) / (n - 1)).sqrt()),
        "reward_min": pl.col(REWARD_MIN),
        "reward_max": pl.col(REWARD_MAX),
        "frac_reward_zero_std": ratio(pl.col(ZERO_STD_ROWS), rows),
        "group_reward_std": ratio(pl.col(STD_SUM), pl.col(STD_ROWS)),
        "zero_std_groups": pl.col(ZERO_STD_GROUPS),
        "zero_std_group_share": ratio(pl.col(ZERO_STD_GROUPS), groups),
        "singleton_groups": pl.col(SINGLETON_GROUPS),
        "null_rewards": pl.col(NULL_REWARDS),
    }
    if BATCH_VALUES in names:
        figures["batches"] = pl.col(BATCH_VALUES).list.len().cast(pl.Int64)
    if SCORED_GROUPS in names:
        figures["zero_std_solved"] = pl.col(SOLVED_GROUPS)
        figures["zero_std_failed"] = pl.col(FAILED_GROUPS)
        figures["pass_at_n"] = ratio(pl.col(PASSING_GROUPS), pl.col(SCORED_GROUPS))
        figures["pass_at_1"] = ratio(pl.col(GROUP_MEAN_SUM), pl.col(SCORED_GROUPS))
    if ADV_N in names:
        figures["advantage_mean"] = pl.when(pl.col(ADV_N) > 0).then(pl.col(ADV_MEAN))
        figures["advantage_min"] = pl.col(ADV_MIN)
        figures["advantage_max"] = pl.col(ADV_MAX)
        figures["frac_zero_advantage"] = ratio(pl.col(ADV_ZERO), rows)
    return merged.select(*by, *(expr.alias(name) for name, expr in figures.items()))


def one_row_groups(merged: pl.DataFrame) -> int:
    """The groups of one row, from the size histogram of one row of merged partials."""
    entries = merged.get_column(SIZE_HIST)[0]
    ones = entries.filter(entries.struct.field(_SIZE) == 1).struct.field(_COUNT)
    return int(ones.sum())


def _median() -> pl.Expr:
    """The median group size from the size histogram: the mean of the sizes at the two
    middle positions of the groups sorted by size (null without groups)."""
    size = pl.element().struct.field(_SIZE)
    count = pl.element().struct.field(_COUNT)
    total, seen = count.sum(), count.cum_sum()
    hist = pl.col(SIZE_HIST)
    lo = hist.list.eval(size.filter(seen > (total - 1) // 2).first()).list.first()
    hi = hist.list.eval(size.filter(seen > total // 2).first()).list.first()
    return (lo + hi) / 2


# ------------------------------------------------------------------ batch statistics
_BATCH_PARTS: Final = ("weight", "mean", "m2", "count", "max", "min", "nonzero")


def batch_partials(
    frame: pl.LazyFrame | pl.DataFrame,
    inputs: Sequence[tuple[pl.Expr, pl.Expr]],
    by: Sequence[str],
) -> pl.DataFrame:
    """Per value of the batch key ``by``, the partials of each batch input ``(x, w)``: for
    input k, ``batch_stat_column(k, part)`` for weight (``W = sum w``), mean
    (``sum w x / W``), m2 (``sum w (x - mean)^2``), count (non-null x), max, min and
    nonzero. Null x (and null w) count nowhere."""
    aggs: list[pl.Expr] = []
    for k, (x, w) in enumerate(inputs):
        weight = w.sum()
        mean = (x * w).sum() / weight
        col = {part: batch_stat_column(k, part) for part in _BATCH_PARTS}
        aggs += [
            weight.alias(col["weight"]),
            pl.when(weight > 0).then(mean).alias(col["mean"]),
            (w * (x - mean) ** 2).sum().alias(col["m2"]),
            x.count().cast(pl.Int64).alias(col["count"]),
            x.max().cast(pl.Float64).alias(col["max"]),
            x.min().cast(pl.Float64).alias(col["min"]),
            (x != 0).sum().cast(pl.Int64).alias(col["nonzero"]),
        ]
    return frame.lazy().group_by(list(by)).agg(aggs).collect()


def merge_batch_partials(
    parts: pl.DataFrame | Iterable[pl.DataFrame], by: Sequence[str], inputs: int
) -> pl.DataFrame:
    """The batch partials of the union of disjoint sets of rows, one row per value of
    ``by`` (moments merged by Chan et al.'s formula)."""
    frame = parts if isinstance(parts, pl.DataFrame) else pl.concat(parts, how="vertical")
    aggs: list[pl.Expr] = []
    for k in range(inputs):
        col = {part: batch_stat_column(k, part) for part in _BATCH_PARTS}
        aggs += _chan(col["weight"], col["mean"], col["m2"])
        aggs += [
            pl.col(col["count"]).sum(),
            pl.col(col["max"]).max(),
            pl.col(col["min"]).min(),
            pl.col(col["nonzero"]).sum(),
        ]
    return frame.lazy().group_by(list(by)).agg(aggs).collect()


def finish_batch_stats(merged: pl.DataFrame, by: Sequence[str], inputs: int) -> pl.DataFrame:
    """The batch statistics (``BATCH_STATS`` of :mod:`grpo_cli.core.estimators`) of merged
    batch partials: per input k, ``batch_stat_column(k, name)`` for mean, count, max, min
    and nonzero, and the weight ``W`` and ``m2`` its variance is made of (``m2 / (W -
    ddof)``, with the ddof of the formula asking: :func:`batch_var`); one row per value of
    ``by``."""
    names = ("mean", "weight", "m2", "count", "max", "min", "nonzero")
    return merged.select(
        *by, *(batch_stat_column(k, name) for k in range(inputs) for name in names)
    )


def batch_var(index: int, ddof: int) -> pl.Expr:
    """The variance of batch input ``index`` with ``ddof``, from its finished statistics
    (:func:`finish_batch_stats`)."""
    m2, weight = (pl.col(batch_stat_column(index, part)) for part in ("m2", "weight"))
    return m2 / (weight - ddof)


# ------------------------------------------------------------------ trainer log lines
LENGTH_COLUMNS: Final = ("length", "completion_length", "response_length")


def trainer_aggs(
    columns: Sequence[str],
    reward_cols: Sequence[str],
    length_col: str | None,
    advantage: str | None,
) -> list[pl.Expr]:
    """Figures TRL logs next to the reward, as aggregations over a set of rows (not
    partials):

    - with several reward columns, per reward function ``rewards/<col>/mean`` and
      ``rewards/<col>/std`` (ddof 1, NaN as null: TRL's nanmean / nanstd);
    - with a length column (``length_col``, else the first of ``LENGTH_COLUMNS`` present):
      ``completions/mean_length``, ``completions/min_length``, ``completions/max_length``
      (TRL), and with an advantage column ``length_advantage_corr``, Pearson's correlation
      of length and advantage (null when either is constant).
    """
    aggs: list[pl.Expr] = []
    if len(reward_cols) > 1:
        for column in reward_cols:
            value = pl.col(column).cast(pl.Float64).fill_nan(None)
            aggs += [
                value.mean().alias(f"rewards/{column}/mean"),
                value.std(ddof=1).alias(f"rewards/{column}/std"),
            ]
    length = length_col or next((c for c in LENGTH_COLUMNS if c in columns), None)
    if length is not None and length in columns:
        value = pl.col(length).cast(pl.Float64)
        aggs += [
            value.mean().alias("completions/mean_length"),
            value.min().alias("completions/min_length"),
            value.max().alias("completions/max_length"),
        ]
        if advantage is not None:
            a = pl.col(advantage).cast(pl.Float64).fill_nan(None)
            aggs.append(pl.corr(value, a).alias("length_advantage_corr"))
    return aggs


# The names each trainer logs a figure under, where they differ from the figure's own
# (TRL's, or ours). verl 0.9 (metric_utils.py compute_data_metrics) logs no score std, and
# its critic/advantages/mean is over tokens, which a per-response log cannot give.
# OpenRLHF 0.11: ppo_trainer.py's rollout statistics.
TRAINER_NAMES: Final[dict[str, dict[str, str]]] = {
    "verl": {
        "reward": "critic/score/mean",
        "reward_min": "critic/score/min",
        "reward_max": "critic/score/max",
        "advantage_min": "critic/advantages/min",
        "advantage_max": "critic/advantages/max",
        "completions/mean_length": "response_length/mean",
        "completions/min_length": "response_length/min",
        "completions/max_length": "response_length/max",
    },
    "OpenRLHF": {
        "reward": "rollout/reward_mean",
        "reward_std": "rollout/reward_std",
        "completions/mean_length": "rollout/response_length_mean",
    },
}


def trainer_names(table: pl.DataFrame, trainer: str | None) -> pl.DataFrame:
    """``table`` with its figures under ``trainer``'s names where they differ
    (``TRAINER_NAMES``: ``verl``, ``OpenRLHF``); TRL's are the figures' own names."""
    names = TRAINER_NAMES.get(trainer or "", {})
    return table.rename({k: v for k, v in names.items() if k in table.columns})


def logged_name(figure: str) -> list[str]:
    """``figure``'s own name and every name a trainer logs it under."""
    logged = (names[figure] for names in TRAINER_NAMES.values() if figure in names)
    return list(dict.fromkeys([figure, *logged]))

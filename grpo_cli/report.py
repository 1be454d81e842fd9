"""``summarize``: metrics of a reward log per group, per batch value (e.g. per step) and
overall, under the names the trainers log them (no Rich here; see :mod:`grpo_cli.render`).

Every metric is over the reward the estimator sees (the weighted sum of the reward columns,
NaN as null), with groups as ``compute`` forms them. Per batch value (``by``) and overall:

- ``responses``: rows; ``groups``: distinct groups with a row there; ``group_size_min``,
  ``group_size_median``, ``group_size_max``: rows per group.
- ``reward``: mean of the valid rewards (TRL ``reward``, OpenRLHF ``rollout/reward_mean``).
- ``reward_std``: std of the valid rewards, ddof 1 (TRL ``reward_std`` since v0.27,
  OpenRLHF ``rollout/reward_std``); null with fewer than two.
- ``frac_reward_zero_std``: share of responses whose group std (ddof 1) is at most 1e-8
  (TRL: ``isclose(std, 0)`` per completion); a group with one valid reward has no std and
  does not count.
- ``group_reward_std``: mean over responses of their group's std, ddof 1 (OpenRLHF
  ``group_reward_std``); responses of one-reward groups are left out.
- ``zero_std_groups``: groups with at least two valid rewards, all exactly equal.
- ``singleton_groups``: groups with exactly one valid reward; ``null_rewards``: null or NaN.
- Binary rewards only (every valid reward is 0 or 1): ``pass_at_n``, the share of groups
  with at least one success (OpenRLHF ``pass{n}``: mean of the group maxima), and
  ``pass_at_1``, the mean of the groups' success rates (OpenRLHF ``pass1``).
- Annotated input only (it has the advantage column): ``advantage_mean``,
  ``advantage_min``, ``advantage_max``, and ``frac_zero_advantage``, the share of
  responses whose advantage is exactly 0.

A group is counted in every batch value where it has rows; its statistics are over all of
its rows (a group spans batch values only when the group key does not include the batch).
Groups that span the batch column are refused, and groups that span the log's step column
give a warning (see :func:`grpo_cli.summary.span_warnings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from grpo_cli.compute import (
    REWARD_KEY,
    Keys,
    collision_columns,
    combined_reward,
    hash_collision,
    hash_columns,
    resolve_keys,
    validate_frame,
    with_keys,
)
from grpo_cli.errors import InputError, OptionsError
from grpo_cli.options import AdvantageOptions
from grpo_cli.summary import DISPLAY_NAMES, check_batch_spans, group_table, span_warnings

ZERO_STD_ATOL: Final = 1e-8  # torch.isclose's default atol, as TRL uses it
LEVELS: Final = ("step", "group", "overall")

_SIZE = "__grpo_r_size"
_VALID = "__grpo_r_valid"
_STD = "__grpo_r_std1"
_MAX = "__grpo_r_max"
_MEAN = "__grpo_r_mean"
_ALL = "__grpo_r_all"


@dataclass(frozen=True)
class Report:
    """What ``summarize`` shows: the three tables and how they were made.

    Attributes:
        overall: one row of metrics over the whole log.
        steps: one row of metrics per value of ``by`` (empty without ``by``).
        groups: one row per group: key, batch values, size, n_null, mean, std, min, max,
            zero_std (and advantage_mean on annotated input).
        by: the batch columns of ``steps``.
        binary: every valid reward is 0 or 1 (the pass metrics are present).
        annotated: the input has the advantage column (the advantage metrics are present).
        rewards: the valid rewards, for histograms; advantages: likewise (or None).
        warnings: what the user should know (groups that span steps), one line each.
    """

    overall: pl.DataFrame
    steps: pl.DataFrame
    groups: pl.DataFrame
    by: tuple[str, ...]
    binary: bool
    annotated: bool
    rewards: pl.Series
    advantages: pl.Series | None
    warnings: tuple[str, ...] = ()

    def table(self, level: str) -> pl.DataFrame:
        """The table of ``level`` (step, group or overall)."""
        if level not in LEVELS:
            raise OptionsError(f"unknown --level {level!r}", hint=f"choose {', '.join(LEVELS)}")
        if level == "step" and not self.by:
            raise OptionsError(
                "--level step needs a batch column", hint="give --by COL (e.g. --by step)"
            )
        return {"step": self.steps, "group": self.groups, "overall": self.overall}[level]


def default_by(columns: list[str], options: AdvantageOptions) -> tuple[str, ...]:
    """The per-step column when the user names none: the batch column, else ``step``."""
    if options.batch_col:
        return (options.batch_col,)
    return ("step",) if "step" in columns else ()


def summarize(
    frame: pl.DataFrame, options: AdvantageOptions, by: tuple[str, ...] | None = None
) -> Report:
    """The :class:`Report` of a raw or annotated reward log (see the module docstring)."""
    if options.estimator == "process" or options.aggregation != "sum_then_normalize":
        raise OptionsError(
            "summarize works on outcome rewards combined by a weighted sum",
            hint="drop --estimator process / --aggregation normalize_then_sum",
        )
    by = default_by(frame.columns, options) if by is None else by
    missing = [c for c in by if c not in frame.columns]
    if missing:
        raise InputError(
            f"no column {missing[0]!r} to summarize by",
            hint=f"columns are: {', '.join(frame.columns[:12])}",
        )
    annotated = options.advantage_col in frame.columns
    check = options.with_overrides(advantage_col="__grpo_r_unused")
    validate_frame(frame, check)
    prepared, keys = _prepare(frame, options, hashed=True)
    if hash_collision(prepared, keys):  # about 1e-19 per pair of keys: group the keys themselves
        prepared, keys = _prepare(frame, options, hashed=False)
    check_batch_spans(prepared, options, keys, size_col=_SIZE)
    rewards = prepared[REWARD_KEY].drop_nulls()
    binary = rewards.len() > 0 and bool(rewards.is_in([0.0, 1.0]).all())
    adv = options.advantage_col if annotated else None
    if adv is not None and not prepared.schema[adv].is_numeric():
        raise InputError(
            f"column {adv!r} is {prepared.schema[adv]}, not numbers",
            hint="--advantage-col names the logged advantage column",
        )
    group = [g for g in keys.group if g not in by]
    per_group = (
        prepared.lazy()
        .group_by([*by, *group])
        .agg(pl.col(_SIZE, _VALID, _STD, _MAX, _MEAN).first())
        .collect()
    )
    whole = pl.lit(0).alias(_ALL)
    # A group with rows in several values of ``by`` is counted once overall (its whole key:
    # positional keys hold the batch column, which ``group`` leaves out).
    one_per_group = per_group.unique(subset=list(keys.group), keep="first") if by else per_group
    overall = _metrics(
        prepared.lazy().with_columns(whole),
        one_per_group.lazy().with_columns(whole),
        (_ALL,),
        binary,
        adv,
    )
    steps = (
        _metrics(prepared.lazy(), per_group.lazy(), by, binary, adv).sort(list(by))
        if by
        else pl.DataFrame()
    )
    groups = _group_rows(prepared, options, keys, by, adv)
    return Report(
        overall=overall.drop(_ALL),
        steps=steps,
        groups=groups,
        by=by,
        binary=binary,
        annotated=annotated,
        rewards=rewards,
        advantages=prepared[adv].cast(pl.Float64).drop_nulls().drop_nans() if adv else None,
        warnings=span_warnings(prepared, options, keys, size_col=_SIZE),
    )


def _prepare(
    frame: pl.DataFrame, options: AdvantageOptions, *, hashed: bool
) -> tuple[pl.DataFrame, Keys]:
    """Every row with its reward and its group's figures; groups found through a 64-bit
    hash of the key when ``hashed`` (3x faster than grouping strings), as in ``compute``."""
    keys = resolve_keys(options, hashed=hashed and options.group_size is None)
    rows = with_keys(frame.lazy(), options, keys).with_columns(
        *hash_columns(keys), combined_reward(options).alias(REWARD_KEY)
    )
    rows = rows.with_columns(*_group_columns(list(keys.group)), *collision_columns(keys))
    return rows.collect(), keys


def _group_rows(
    prepared: pl.DataFrame,
    options: AdvantageOptions,
    keys: Keys,
    by: tuple[str, ...],
    adv: str | None,
) -> pl.DataFrame:
    """The group table, with each group's batch values (first seen) and mean advantage."""
    exact = list(keys.exact)
    batch = [c for c in by if c not in exact]
    extra = [pl.col(c).first() for c in batch]
    if adv is not None:
        extra.append(pl.col(adv).cast(pl.Float64).mean().alias("advantage_mean"))
    table = group_table(prepared.lazy(), options, keys, extra)
    shown = [DISPLAY_NAMES.get(k, k) for k in exact]
    rest = [c for c in table.columns if c not in shown and c not in batch]
    return table.select(*shown, *batch, *rest)


def _group_columns(group: list[str]) -> list[pl.Expr]:
    r = pl.col(REWARD_KEY)
    return [
        pl.len().over(group).alias(_SIZE),
        r.count().over(group).alias(_VALID),
        r.std(ddof=1).over(group).alias(_STD),
        r.max().over(group).alias(_MAX),
        r.mean().over(group).alias(_MEAN),
    ]


def _metrics(
    rows: pl.LazyFrame,
    per_group: pl.LazyFrame,
    by: tuple[str, ...],
    binary: bool,
    adv: str | None,
) -> pl.DataFrame:
    """One row of metrics per value of ``by`` (see the module docstring), from the rows and
    from one row per (``by``, group) with the group's figures."""
    r = pl.col(REWARD_KEY)
    std = pl.col(_STD)
    per_row = [
        pl.len().alias("responses"),
        r.mean().alias("reward"),
        r.std(ddof=1).alias("reward_std"),
        (std <= ZERO_STD_ATOL).fill_null(False).mean().alias("frac_reward_zero_std"),
        std.mean().alias("group_reward_std"),
        r.is_null().sum().cast(pl.Int64).alias("null_rewards"),
    ]
    if adv is not None:
        a = pl.col(adv).cast(pl.Float64).fill_nan(None)
        per_row += [
            a.mean().alias("advantage_mean"),
            a.min().alias("advantage_min"),
            a.max().alias("advantage_max"),
            (a == 0.0).fill_null(False).mean().alias("frac_zero_advantage"),
        ]
    row_table = rows.group_by(list(by)).agg(per_row)
    valid = pl.col(_VALID)
    group_aggs = [
        pl.len().cast(pl.Int64).alias("groups"),
        pl.col(_SIZE).min().cast(pl.Int64).alias("group_size_min"),
        pl.col(_SIZE).median().alias("group_size_median"),
        pl.col(_SIZE).max().cast(pl.Int64).alias("group_size_max"),
        ((valid >= 2) & (pl.col(_STD) == 0.0)).sum().cast(pl.Int64).alias("zero_std_groups"),
        (valid == 1).sum().cast(pl.Int64).alias("singleton_groups"),
    ]
    if binary:
        scored = valid >= 1
        group_aggs += [
            (pl.col(_MAX) == 1.0).filter(scored).mean().alias("pass_at_n"),
            pl.col(_MEAN).filter(scored).mean().alias("pass_at_1"),
        ]
    group_table_ = per_group.group_by(list(by)).agg(group_aggs)
    joined = row_table.join(group_table_, on=list(by), how="left")
    order = [
        *by,
        "responses",
        "groups",
        "group_size_min",
        "group_size_median",
        "group_size_max",
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "group_reward_std",
        "zero_std_groups",
        "singleton_groups",
        "null_rewards",
    ]
    if binary:
        order += ["pass_at_n", "pass_at_1"]
    if adv is not None:
        order += ["advantage_mean", "advantage_min", "advantage_max", "frac_zero_advantage"]
    return joined.select(order).collect()


def histogram(values: pl.Series, bins: int = 20) -> tuple[list[float], list[int]]:
    """Equal-width histogram of ``values``: ``bins + 1`` edges and ``bins`` counts (one bin
    around the value when all values are equal; no bins for no values)."""
    import numpy as np

    data = values.cast(pl.Float64).drop_nulls().drop_nans().to_numpy()
    data = data[np.isfinite(data)]
    if data.size == 0:
        return [], []
    lo, hi = float(data.min()), float(data.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(data, bins=bins, range=(lo, hi))
    return [float(e) for e in edges], [int(c) for c in counts]

"""Summary tables of a reward log, as Polars frames and plain dataclasses (no Rich here).

The reward is the one the estimator saw (the weighted sum of several reward columns; for
``process``, every step reward).

- ``size``: rows (responses) in the group; ``n_null``: null or NaN rewards.
- ``mean``, ``std`` (with the run's ddof), ``min``, ``max``: over the valid rewards.
- ``zero_std``: the group has at least two valid rewards and they are all equal (its
  variance is exactly 0; see ``EstimatorContext.is_constant``).
- a singleton group has exactly one valid reward.

The run's figures (:class:`RunSummary`) are defined in :mod:`grpo_cli.core.metrics`.

A group key without the step (or batch) column pools a prompt sampled again in a later step
into one group: :func:`check_batch_spans` refuses that for a batch column,
:func:`span_warnings` warns for a step-like column.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.columns import (
    GROUP_HASH,
    POSITION_KEY,
    RESPONSE_IDS,
    REWARD_KEY,
    ROW_KEY,
    SIZE_KEY,
    SPAN_ROW,
    SPAN_VALUES,
    STAT_MEAN,
    STAT_VAR,
    UID_GROUP,
    VALID_KEY,
    readable,
    span_flag_column,
)
from grpo_cli.core.errors import InputError, Message, option
from grpo_cli.core.expressions import collect
from grpo_cli.core.grouping import profile_aggregations, with_profile, zero_spread
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Keys, Plan, keyed_groups, step_column
from grpo_cli.core.policies import reads_batch
from grpo_cli.core.rewards import reward_expr

GROUP_TABLE_COLUMNS: Final = ("size", "n_null", "mean", "std", "min", "max", "zero_std")
DISPLAY_NAMES: Final = {POSITION_KEY: "group_index", UID_GROUP: "group"}


def reward_units(frame: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """One row per reward the estimator saw, with ROW_KEY (the response) and REWARD_KEY."""
    options = plan.options
    if plan.estimator.unit == "step" and options.step_rewards_col:
        column = options.step_rewards_col
        return (
            frame.with_row_index(ROW_KEY)
            .explode(column)
            .with_columns(reward_expr(column, options.nulls).alias(REWARD_KEY))
        )
    return frame.with_row_index(ROW_KEY)


def group_table(annotated: pl.LazyFrame, plan: Plan, extra: Sequence[pl.Expr] = ()) -> pl.DataFrame:
    """One row per group of ``annotated`` (made by ``plan``, with its key columns), in order
    of first appearance: keys (temporary ones by their DISPLAY_NAMES), GROUP_TABLE_COLUMNS,
    then the ``extra`` aggregations (named expressions)."""
    options, keys = plan.options, plan.keys
    r = pl.col(REWARD_KEY)
    firsts = [pl.col(c).first() for c in keys.exact] if keys.hashed else []
    process = plan.estimator.unit == "step"
    size = pl.col(ROW_KEY).n_unique() if process else None
    units = reward_units(annotated, plan) if process else annotated
    table = (
        units.group_by(list(keys.group), maintain_order=True)
        .agg(
            *firsts,
            *profile_aggregations(options.ddof, size=size),
            r.is_null().sum().cast(pl.Int64).alias("n_null"),
            r.min().alias("min"),
            r.max().alias("max"),
            *extra,
        )
        .with_columns(
            pl.col(SIZE_KEY).alias("size"),
            pl.col(STAT_MEAN).alias("mean"),
            pl.col(STAT_VAR).sqrt().alias("std"),
            zero_spread(pl.col(VALID_KEY), pl.col(STAT_VAR)).alias("zero_std"),
        )
        .select(*keys.exact, *GROUP_TABLE_COLUMNS, *(e.meta.output_name() for e in extra))
    )
    renames = {k: DISPLAY_NAMES[k] for k in keys.exact if k in DISPLAY_NAMES}
    return collect(table.rename(renames), deterministic=options.deterministic)


@dataclass(frozen=True)
class RunSummary:
    """Figures of one computation (defined in :mod:`grpo_cli.core.metrics`)."""

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
    notices: tuple[Message, ...] = ()  # a file engine's warnings (see piece_warnings)
    route: str | None = None  # how a file engine went through the log, and why

    def engine_warnings(self) -> tuple[Message, ...]:
        """The warnings a file engine found while computing."""
        return self.notices

    @classmethod
    def from_partials(cls, merged: pl.DataFrame) -> RunSummary:
        """The figures of one row of merged partials (:func:`grpo_cli.core.metrics.merge`)."""
        f = metrics.finish(merged).row(0, named=True)
        return cls(
            rows=int(f["responses"]),
            groups=int(f["groups"]),
            batches=int(f.get("batches") or 1),
            group_size_min=int(f["group_size_min"] or 0),
            group_size_median=float(f["group_size_median"] or 0.0),
            group_size_max=int(f["group_size_max"] or 0),
            zero_std_groups=int(f["zero_std_groups"]),
            zero_std_group_share=float(f["zero_std_group_share"] or 0.0),
            frac_reward_zero_std=float(f["frac_reward_zero_std"] or 0.0),
            singleton_groups=int(f["singleton_groups"]),
            null_rewards=int(f["null_rewards"]),
            reward_mean=f["reward"],
            reward_std=f["reward_std"],
            advantage_min=f.get("advantage_min"),
            advantage_max=f.get("advantage_max"),
        )


def summarize_run(annotated: pl.LazyFrame, plan: Plan) -> RunSummary:
    """Overall figures of an annotated frame (with its key and group profile columns; made
    by ``plan``): one query of :func:`grpo_cli.core.metrics.partials`. Process supervision
    (no SIZE_KEY): each response carries its group's profile over the step rewards (size:
    responses), the reward figures are over the step rewards, the advantages every step's."""
    options, keys = plan.options, plan.keys
    advantage, units = pl.col(options.advantage_col), None
    if SIZE_KEY in annotated.collect_schema():
        rows = with_profile(annotated, keys.group, options.ddof)
    else:
        units = reward_units(annotated, plan)
        group = list(keys.group)
        profile = units.group_by(group).agg(
            profile_aggregations(options.ddof, size=pl.col(ROW_KEY).n_unique())
        )
        rows = annotated.join(profile, on=group, how="left", nulls_equal=True)
        advantage = advantage.explode()
    merged = metrics.partials(
        rows,
        ddof=options.ddof,
        rewards=units,
        advantage=advantage,
        batch=keys.batch,
        deterministic=options.deterministic,
    )
    return RunSummary.from_partials(merged)


Spanning = tuple[int, int, tuple[Any, ...]]  # groups, the first row's locator, its values


@dataclass(frozen=True)
class GroupSpans:
    """``count`` groups (by ``key``, as shown) whose rows fall in several values of
    ``column``; ``example``: the first in input order (``prompt_id='p7' in step 1, 2 and
    7``); ``fix``: the options that group within each value (``-g step -g prompt_id``)."""

    count: int
    column: str
    key: str
    example: str
    fix: Message

    def describe(self) -> str:
        """``12 groups (by prompt_id) span several values of step``."""
        plural = "s" if self.count != 1 else ""
        verb = "span" if self.count != 1 else "spans"
        return (
            f"{self.count:,} group{plural} (by {self.key}) {verb} several values of {self.column}"
        )

    def warning(self) -> Message:
        """The one warning line: the groups are pooled across the column's values."""
        pooled = "is" if self.count == 1 else "are"
        return (
            f"{self.describe()} and {pooled} pooled across them (first: {self.example}); "
            f"to group within each {self.column}: " + self.fix
        )

    @classmethod
    def of(
        cls, found: Spanning, column: str, first: Mapping[str, Any], exact: Sequence[str]
    ) -> GroupSpans:
        """The spans ``found`` (:func:`spanning_groups`) of ``column``; ``first``: the
        first spanning row, holding the group key columns ``exact``."""
        count, _, values = found
        if any(c.startswith("__grpo_") for c in exact):  # a derived key (verl's uid group)
            fix = option("batch_col", column)  # the layout adds it
        else:
            fix = option("group_cols", (column, *exact), short=True)
        return cls(
            count=count,
            column=column,
            key=", ".join(DISPLAY_NAMES.get(c, c) for c in exact),
            example=f"{key_text(first, exact)} in {column} {_value_list(list(values))}",
            fix=fix,
        )


def group_spans(frame: pl.DataFrame, keys: Keys, column: str) -> GroupSpans | None:
    """The groups of ``frame`` (with the columns of ``keys``) whose rows hold several values
    of ``column``, or None. One cheap pass first (the engine's flag,
    :func:`grpo_cli.core.plan.span_flag`, or :func:`_pairs_outnumber_groups`); the key is
    grouped only when some group spans."""
    flagged = span_flag_column(column) in frame.columns
    if not flagged and keys.hashed and not _pairs_outnumber_groups(frame, column):
        return None
    found = spanning_groups(frame, keys.group, column)
    if found is None:
        return None
    return GroupSpans.of(found, column, frame.row(found[1], named=True), keys.exact)


def spanning_groups(
    frame: pl.DataFrame, group: Sequence[str], column: str, locator: str | None = None
) -> Spanning | None:
    """The groups (by ``group``) of ``frame`` whose rows hold several values of ``column``
    (null is a value), or None: their count, the first such row (its position, or its
    ``locator`` column's value where smallest) and that group's values, sorted. With the
    engine's flag (:func:`grpo_cli.core.plan.span_flag`) and no row flagged, no grouping."""
    flag = span_flag_column(column)
    if flag in frame.columns and not frame.get_column(flag).any():
        return None
    keys = list(group)
    spanning = (
        frame.lazy()
        .group_by(keys)
        .agg(pl.col(column).n_unique().alias(SPAN_VALUES))
        .filter(pl.col(SPAN_VALUES) > 1)
        .select(keys)
        .collect(engine="streaming")
    )
    if spanning.height == 0:
        return None
    rows = frame.lazy().with_row_index(SPAN_ROW)
    order = pl.col(SPAN_ROW if locator is None else locator)
    found = rows.join(spanning.lazy(), on=keys, how="semi")
    first = collect(found.select(pl.col(SPAN_ROW).get(order.arg_min()))).item()
    same_group = frame.lazy().join(frame.slice(first, 1).lazy().select(keys), on=keys, how="semi")
    values = collect(same_group.select(pl.col(column).unique().sort(nulls_last=True)))
    where = first if locator is None else int(frame.get_column(locator)[first])
    return spanning.height, where, tuple(values.get_column(column))


def key_text(row: Mapping[str, Any], exact: Sequence[str]) -> str:
    """A group key as messages show it, from a ``row`` holding its columns ``exact``:
    ``step=1, prompt_id='p015'`` (temporary key columns by their display names)."""
    return ", ".join(f"{DISPLAY_NAMES.get(c, c)}={row[c]!r}" for c in exact)


@dataclass(frozen=True)
class Repeats:
    """``rows`` whose ``column`` id (:func:`response_id`) appeared before in their group (a
    log concatenated with itself); ``example``: the first, as shown (``completion_id=1 in
    the group step=1, prompt_id='p015'``)."""

    rows: int
    column: str
    example: str

    @classmethod
    def of(cls, rows: int, column: str, first: Mapping[str, Any], exact: Sequence[str]) -> Repeats:
        """``rows`` repeats of ``column``, the first in the row ``first`` (holding
        ``column`` and the group key columns ``exact``)."""
        example = f"{column}={first[column]!r} in the group {key_text(first, exact)}"
        return cls(rows, column, example)

    def warning(self) -> str:
        """The one warning line."""
        verb = "rows repeat" if self.rows != 1 else "row repeats"
        return (
            f"{self.rows:,} {verb} a {self.column} within their group (e.g. {self.example}): "
            "duplicated rows count twice in the group's mean and std"
        )


def response_id(columns: Collection[str], options: AdvantageOptions) -> str | None:
    """The user's column naming each response, to find duplicated rows: the first of
    RESPONSE_IDS in ``columns`` that is not in the group key (``completion_id`` may
    count from 1 in every group: only a repeat within a group is a duplicate); on a verl
    dump grouped by its uid group, ``uid`` (see :func:`response_expr`); else None."""
    key = set(options.group_cols)
    found = next((c for c in RESPONSE_IDS if c in columns and c not in key), None)
    if found is None and UID_GROUP in key and "uid" in columns:
        return "uid"
    return found


def response_expr(column: str) -> pl.Expr:
    """The response id ``column`` as the duplicate check reads it: null ids are never
    duplicates, and verl's ``uid`` is null where it equals its uid group (a uid without
    ``_{session}_{index}``, as verl's batch holds it, names the prompt, not a response)."""
    if column == "uid":
        return pl.when(pl.col(column).cast(pl.String) != pl.col(UID_GROUP)).then(pl.col(column))
    return pl.col(column)


def repeated_rows(
    frame: pl.DataFrame, group: Sequence[str], response: pl.Expr
) -> tuple[int, int | None]:
    """The rows of ``frame`` whose ``response`` id (not null) appeared before in their
    group (``group``: key columns or hash), and the position of the first (None without).
    A pass over (group, id) hashes first (equal pairs hash equal: no repeat is missed);
    an exact pass only when they are fewer than the ids."""
    valid = response.is_not_null()
    pair = pl.struct(*group, response)
    ids, distinct = frame.select(
        valid.sum().alias("ids"), pair.hash(seed=7).filter(valid).n_unique().alias("pairs")
    ).row(0)
    if ids == distinct:
        return 0, None
    repeated = valid & ~pair.is_first_distinct()
    count, first = frame.select(repeated.sum().alias("n"), repeated.arg_max().alias("i")).row(0)
    return (int(count), int(first)) if count else (0, None)


def repeat_warning(frame: pl.DataFrame, plan: Plan) -> tuple[Message, ...]:
    """The warning line of :class:`Repeats` for an annotated in-memory ``frame`` (with its
    key columns) made by ``plan``, if any."""
    column = response_id(frame.columns, plan.options)
    if column is None:
        return ()
    count, first = repeated_rows(frame, plan.keys.group, response_expr(column))
    if first is None:
        return ()
    return (Repeats.of(count, column, frame.row(first, named=True), plan.keys.exact).warning(),)


def _pairs_outnumber_groups(frame: pl.DataFrame, column: str) -> bool:
    """Whether some group holds several values of ``column``: the distinct (group hash,
    value) pairs, hashed, outnumber the groups (from SIZE_KEY, 1/s per row, else distinct
    hashes). A false "no" needs two pairs to share a 64-bit hash (1e-8 for 1M pairs)."""
    group = pl.col(GROUP_HASH)
    pairs = (group ^ pl.col(column).hash(seed=7)).n_unique()
    if SIZE_KEY in frame.columns:
        groups = (1.0 / pl.col(SIZE_KEY).cast(pl.Float64)).sum()
    else:
        groups = group.n_unique().cast(pl.Float64)
    counts = frame.lazy().select(pairs=pairs, groups=groups).collect(engine="streaming")
    return int(counts["pairs"][0]) > round(float(counts["groups"][0]))


def _value_list(values: list[object]) -> str:
    """``1, 2 and 7``; ``1, 2, 3, ... and 40 (12 values)`` for more than five."""
    shown = [repr(v) if isinstance(v, str) else str(v) for v in values]
    if len(shown) > 5:
        return f"{', '.join(shown[:3])}, ... and {shown[-1]} ({len(shown)} values)"
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


def check_batch_spans(frame: pl.DataFrame, plan: Plan) -> None:
    """Refuse groups whose rows fall in several values of the batch column (they would be
    pooled across batches); positional groups and keys holding the column cannot."""
    column, keys = plan.options.batch_col, plan.keys
    if column is None or column in keys.exact or not keyed_groups(plan):
        return
    spans = group_spans(frame, keys, column)
    if spans is not None:
        raise InputError(
            f"{spans.describe()} (batch column); first: {spans.example}",
            hint="group within each batch: " + spans.fix,
        )


def span_warnings(frame: pl.DataFrame, plan: Plan) -> tuple[Message, ...]:
    """The warning lines of :func:`run_warnings` for an annotated in-memory ``frame`` (with
    its key and group profile columns) made by ``plan``."""
    column = step_column(plan)
    spans = None if column is None else group_spans(frame, plan.keys, column)
    singles = groups = 0
    if keyed_groups(plan) and SIZE_KEY in frame.columns and frame.height:
        size = pl.col(SIZE_KEY).cast(pl.Float64)
        groups, singles = frame.select(
            (1.0 / size).sum().round().cast(pl.Int64), (size == 1).sum().cast(pl.Int64)
        ).row(0)
    return run_warnings(plan, spans, singles, groups, repeat_warning(frame, plan))


def piece_warnings(
    plan: Plan,
    merged: pl.DataFrame,
    spanned: Spanning | None,
    repeats: tuple[int, int] | None,
    response: str | None,
    row: Callable[[int], Mapping[str, Any]],
) -> tuple[Message, ...]:
    """The warning lines of :func:`run_warnings` for an engine that computed the log in
    pieces (each group whole in one): from its ``merged`` run partials, the groups its
    pieces found spanning the step column
    (:func:`grpo_cli.engines.narrow.merge_spans`) and the rows repeating the
    ``response`` id (count, locator of the first); ``row``: the input row at a locator,
    with its key columns and the response id (read only for a warning)."""
    exact, column = plan.keys.exact, step_column(plan)
    spans = None
    if spanned is not None and column is not None:
        spans = GroupSpans.of(spanned, column, row(spanned[1]), exact)
    found: tuple[Message, ...] = ()
    if repeats is not None and response is not None:
        found = (Repeats.of(repeats[0], response, row(repeats[1]), exact).warning(),)
    groups = int(merged.get_column(metrics.GROUPS)[0] or 0) if keyed_groups(plan) else 0
    singles = metrics.one_row_groups(merged) if groups else 0
    return run_warnings(plan, spans, singles, groups, found)


def run_warnings(
    plan: Plan,
    spans: GroupSpans | None,
    singles: int,
    groups: int,
    repeats: tuple[Message, ...],
) -> tuple[Message, ...]:
    """Every engine's warning lines, in this order: a batch-level estimator without a batch
    column on a log with a step-like column; groups spanning that column (``spans``); more
    than half of the ``groups`` holding one row (``singles``: a wrong key); the
    ``repeats`` of response ids (:class:`Repeats`)."""
    key = ", ".join(readable(c) for c in plan.options.group_cols)
    return (
        *_batch_warnings(plan),
        *(() if spans is None else (spans.warning(),)),
        *singleton_warning(singles, groups, key, option("group_cols")),
        *repeats,
    )


def singleton_warning(singles: int, groups: int, key: str, fix: Message) -> tuple[Message, ...]:
    """The line when more than half of the ``groups`` (by ``key``, as shown) hold one
    response (``singles``): the key is probably a per-response id; ``fix``: how to name
    the prompt's. Nothing without groups."""
    if not groups or singles * 2 <= groups:
        return ()
    return (
        f"{singles:,} of {groups:,} groups (by {key}) hold a single response: the group key "
        "is probably wrong (a group is one prompt's responses; name it with " + fix + ")",
    )


def _batch_warnings(plan: Plan) -> tuple[Message, ...]:
    options, column = plan.options, plan.step_col
    if options.batch_col is not None or column is None or not reads_batch(options, plan.estimator):
        return ()
    return (
        f"{options.estimator} reads batch statistics and no "
        + option("batch_col")
        + " is given: the whole "
        f"log is one batch; {column!r} looks like the batch (a trainer computes per step): "
        + option("batch_col", column),
    )

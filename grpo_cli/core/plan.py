"""The plan of one computation: every decision made once, before any engine runs; engines
never check or look anything up again.

Keys. The group key is ``group_cols``, or with ``group_size`` G the position
``row_in_batch // G`` within each batch value; the batch key is ``batch_col`` or one constant
batch. Engines group one UInt64 hash of the key (grouping strings is the costly part); a
second, independent hash detects a collision (about 1e-19 per pair of keys), and
:func:`run_with_fallback` then reruns the engine on the exact key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from grpo_cli.core.columns import (
    BATCH_KEY,
    CHECK_HASH,
    CHECK_MAX,
    GROUP_HASH,
    POSITION_KEY,
    REWARD_KEY,
    span_flag_column,
)
from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.errors import Message
from grpo_cli.core.estimators import BatchStatSource, Estimator, EstimatorContext
from grpo_cli.core.options import AdvantageOptions


@dataclass(frozen=True)
class Keys:
    """The key columns: ``group`` (windows run over it: a hash of ``exact`` when
    ``hashed``), ``batch``, ``exact`` (the group key itself), and ``check``, a second,
    independent hash of the key when ``group`` is one (the windows then add CHECK_MAX,
    which detects two keys sharing the first hash)."""

    group: tuple[str, ...]
    batch: tuple[str, ...]
    exact: tuple[str, ...]
    hashed: bool = False
    check: str | None = None


def resolve_keys(options: AdvantageOptions, *, hashed: bool = False) -> Keys:
    """The group and batch key columns the options call for (``hashed``: windows run over
    GROUP_HASH, see the module docstring)."""
    batch = (options.batch_col,) if options.batch_col else (BATCH_KEY,)
    if options.group_size is not None:
        extra = (options.batch_col,) if options.batch_col else ()
        exact: tuple[str, ...] = (*extra, POSITION_KEY)
    else:
        exact = options.group_cols
    if hashed and exact:
        return Keys(group=(GROUP_HASH,), batch=batch, exact=exact, hashed=True, check=CHECK_HASH)
    return Keys(group=exact, batch=batch, exact=exact)


def with_keys(frame: pl.LazyFrame, options: AdvantageOptions) -> pl.LazyFrame:
    """Add the temporary key columns (constant batch, positional group) the options need."""
    columns = []
    if options.batch_col is None:
        columns.append(pl.lit(0, dtype=pl.Int8).alias(BATCH_KEY))
    if options.group_size is not None:
        position = pl.int_range(pl.len(), dtype=pl.Int64)
        if options.batch_col is not None:
            position = position.over(options.batch_col)
        columns.append((position // options.group_size).alias(POSITION_KEY))
    return frame.with_columns(columns) if columns else frame


def hash_columns(keys: Keys) -> list[pl.Expr]:
    """The group hash and the independent check hash, when ``keys`` are hashed."""
    if not keys.hashed:
        return []
    key = pl.col(keys.exact[0]) if len(keys.exact) == 1 else pl.struct(list(keys.exact))
    return [key.hash(seed=0).alias(GROUP_HASH), key.hash(seed=1).alias(CHECK_HASH)]


def collision_columns(keys: Keys) -> list[pl.Expr]:
    """Per row, the largest second hash (``keys.check``) of its group (one window
    aggregate), when the group key is a hash."""
    if keys.check is None:
        return []
    return [pl.col(keys.check).max().over(list(keys.group)).alias(CHECK_MAX)]


def hash_collision(frame: pl.DataFrame, keys: Keys) -> bool:
    """Whether two different keys shared a group hash: their second hashes differ, so some
    row's second hash is below its group's largest (``frame`` has CHECK_MAX)."""
    if keys.check is None:
        return False
    return bool(frame.select((pl.col(keys.check) != pl.col(CHECK_MAX)).any()).item())


@dataclass(frozen=True)
class Plan:
    """Every decision of one computation.

    Attributes:
        keys: hashed unless the estimator needs no groups, the key is positional, or the
            plan is the exact fallback.
        has_nulls: the reward may be null somewhere (rows per group then need their own
            window).
        batch_source: where batch statistics come from for an engine that sees the log in
            pieces (:mod:`grpo_cli.engines.batch_partials`); None: windows.
        span_col: the log's integer step column without nulls (:func:`step_column`): the
            engine flags the groups that span it in its one grouping pass.
        step_col: the first of STEP_COLUMNS the log has, or None.
        derived: key columns the layout derives from each row; never written.
        notes: what resolution filled in (a TRL group size inferred, a length column
            taken), one line each.
    """

    options: AdvantageOptions
    estimator: Estimator
    keys: Keys
    has_nulls: bool = True
    batch_source: BatchStatSource | None = None
    span_col: str | None = None
    engine: EngineOptions = field(default_factory=EngineOptions)
    preset: str | None = None
    layout: str | None = None
    step_col: str | None = None
    derived: tuple[str, ...] = ()
    notes: tuple[Message, ...] = ()

    def exact(self) -> Plan:
        """The same plan on the exact group key (the collision fallback)."""
        return replace(self, keys=resolve_keys(self.options, hashed=False))


def keyed_groups(plan: Plan) -> bool:
    """Groups come from key columns (not positions) and the estimator uses them."""
    return plan.options.group_size is None and plan.estimator.uses_groups


def step_column(plan: Plan) -> str | None:
    """The step-like column groups are checked against: the plan's ``step_col``, when
    there is no batch column, groups are by key and the key lacks it."""
    if plan.options.batch_col is not None or not keyed_groups(plan):
        return None
    column = plan.step_col
    return None if column is None or column in plan.keys.exact else column


def span_flag(column: str, group: Sequence[str], rows: pl.Expr | None = None) -> pl.Expr:
    """A per-row flag, set on some row of every group holding several values of
    ``column`` (no nulls) and on no other: ``any()`` tells whether a group spans it.
    Without ``rows``: min != max (two windows, any dtype). With ``rows`` (the group's
    row count, a window the caller has; ``column`` integer): value * rows != the group's
    sum (one window)."""
    keys = list(group)
    if rows is not None:
        values = pl.col(column).cast(pl.Int64)
        spans = values * rows != values.sum().over(keys)
    else:
        spans = pl.col(column).min().over(keys) != pl.col(column).max().over(keys)
    return spans.alias(span_flag_column(column))


def run_with_fallback(run: Callable[[Plan], pl.DataFrame], plan: Plan) -> tuple[pl.DataFrame, Plan]:
    """``run(plan)``, and ``run`` again on the exact key when two group keys shared a hash
    (its frame carries CHECK_MAX): the one collision fallback. Returns the frame and the
    plan that made it."""
    full = run(plan)
    if hash_collision(full, plan.keys):
        plan = plan.exact()
        full = run(plan)
    return full, plan


def estimator_context(
    plan: Plan, reward: pl.Expr | None = None, *, precomputed: bool = False
) -> EstimatorContext:
    """The window helpers for ``plan`` over ``reward`` (default: the combined reward);
    ``precomputed``: the group statistics columns exist (see
    :func:`grpo_cli.core.estimators.group_stat_columns`)."""
    options, keys = plan.options, plan.keys
    return EstimatorContext(
        precomputed=precomputed,
        reward=pl.col(REWARD_KEY) if reward is None else reward,
        group_keys=keys.group,
        batch_keys=keys.batch,
        ddof=options.ddof,
        eps=options.eps,
        eps_mode=options.eps_mode,
        singleton_unit=options.singleton == "verl",
        length=pl.col(options.length_col) if options.length_col else None,
        token_weighted=options.token_weighted,
        baseline=pl.col(options.baseline_col) if options.baseline_col else None,
        shaped_clip=options.clip if options.clip_stage == "shaped" else None,
        batch_source=plan.batch_source,
    )

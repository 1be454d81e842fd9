"""Batch statistics from partials: batch-level estimators on a log seen in pieces (split
along groups), in two passes:

1. :func:`batch_inputs`: the values ``x`` (with weights ``w``) the formula asks batch
   statistics of, found by building it once with a :class:`Recorder` source;
2. :func:`grouped_partials` per piece and batch value, merged and finished
   (:func:`merged_stats`): one small row per batch value;
3. :func:`applied`: the plan reading those statistics (a :class:`Given` source) from
   columns joined onto each piece (:func:`with_batch_stats`). Values are matched by the
   order the formula asks about them, the same on any key (hashed or exact).

Merged partials equal the single-pass statistics up to rounding (about 1e-16 relative).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.columns import batch_stat_column
from grpo_cli.core.estimators import EstimatorContext
from grpo_cli.core.plan import Plan
from grpo_cli.core.policies import reads_batch


def _index_of(inputs: Sequence[tuple[pl.Expr, pl.Expr]], x: pl.Expr) -> int | None:
    return next((k for k, (seen, _) in enumerate(inputs) if seen.meta.eq(x)), None)


@dataclass
class Recorder:
    """A batch statistics source noting each distinct value asked about (with its weight);
    its placeholder answers are never evaluated."""

    inputs: list[tuple[pl.Expr, pl.Expr]] = field(default_factory=list)

    def stat(self, ctx: EstimatorContext, x: pl.Expr, name: str) -> pl.Expr:
        """Note ``x``; a placeholder."""
        if _index_of(self.inputs, x) is None:
            self.inputs.append((x, ctx.batch_weight(x)))
        return pl.lit(0.0)


@dataclass(frozen=True)
class Given:
    """A batch statistics source reading each statistic from its joined column
    (:func:`grpo_cli.core.columns.batch_stat_column`)."""

    inputs: tuple[tuple[pl.Expr, pl.Expr], ...]

    def stat(self, ctx: EstimatorContext, x: pl.Expr, name: str) -> pl.Expr:
        """The column of ``x``'s statistic ``name``."""
        k = _index_of(self.inputs, x)
        if k is None:
            raise RuntimeError(f"batch statistic of an unrecorded value: {x}")
        if name == "var":  # with the asking context's ddof (a whiten stage's own)
            return metrics.batch_var(k, ctx.ddof)
        return pl.col(batch_stat_column(k, name))


def needs_batch_stats(plan: Plan) -> bool:
    """Whether the plan's formula reads batch statistics."""
    return reads_batch(plan.options, plan.estimator)


def batch_inputs(plan: Plan) -> tuple[tuple[pl.Expr, pl.Expr], ...]:
    """The values (and weights) the plan's formula asks batch statistics of, over a frame
    with the group statistics (:func:`grpo_cli.core.expressions.with_group_stats`)."""
    from grpo_cli.core.expressions import advantage_expr

    recorder = Recorder()
    advantage_expr(replace(plan, batch_source=recorder), precomputed=True)
    return tuple(recorder.inputs)


def grouped_partials(grouped: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """The batch partials of ``grouped`` (a piece with its group statistics: every group
    whole in it), per value of the batch key."""
    return metrics.batch_partials(grouped, batch_inputs(plan), plan.keys.batch)


def merged_partials(parts: Sequence[pl.DataFrame], plan: Plan) -> pl.DataFrame:
    """Pieces' partials merged into the partials of their union (one row per batch value)."""
    return metrics.merge_batch_partials(parts, plan.keys.batch, len(batch_inputs(plan)))


def merged_stats(parts: Sequence[pl.DataFrame], plan: Plan) -> pl.DataFrame:
    """The batch statistics of the whole log, one row per batch value, from every piece's
    partials."""
    merged = merged_partials(parts, plan)
    by, inputs = plan.keys.batch, len(batch_inputs(plan))
    return metrics.finish_batch_stats(merged, by, inputs)


def applied(plan: Plan) -> Plan:
    """``plan`` reading its batch statistics from the joined columns."""
    return replace(plan, batch_source=Given(batch_inputs(plan)))


def with_batch_stats(piece: pl.DataFrame, plan: Plan, stats: pl.DataFrame) -> pl.DataFrame:
    """``piece`` with its batch's statistics as columns, rows in their order."""
    from grpo_cli.core.plan import with_keys

    keys = list(plan.keys.batch)
    keyed = with_keys(piece.lazy(), plan.options).collect()
    joined = keyed.join(stats, on=keys, how="left", maintain_order="left", nulls_equal=True)
    return joined.drop([k for k in keys if k not in piece.columns])

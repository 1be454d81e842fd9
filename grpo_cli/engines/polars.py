"""The Polars engine (``--backend polars``, the default): window expressions, no Python loop
over rows or groups, float64.

One grouping pass computes every group statistic (count, mean, variance: see
:func:`grpo_cli.core.grouping.group_stat_columns`) over the plan's group key (its 64-bit hash
unless the plan is exact); the estimator's formula and the shared policies are then
expressions over those columns. Rows keep their input order (dropped singletons aside) and
every input column is returned unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import Message
from grpo_cli.core.expressions import annotate_lazy, collect
from grpo_cli.core.plan import (
    Plan,
)

if TYPE_CHECKING:
    from grpo_cli.core.resolve import Request


@dataclass(frozen=True)
class PolarsEngine:
    """``--backend polars``: computes every estimator and policy."""

    info: EngineInfo

    def refusal(self, plan: Plan | Request) -> Message | None:
        """Nothing: the Polars engine is the reference."""
        return None

    def annotate(self, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
        """See :class:`grpo_cli.engines.FrameEngine`."""
        return collect(annotate_lazy(frame, plan), deterministic=plan.options.deterministic)


ENGINE = PolarsEngine(ENGINES["polars"])

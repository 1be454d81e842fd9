"""The Polars engine (``--backend polars``, the default), float64: one grouping pass
computes the group statistics (:func:`grpo_cli.core.grouping.group_stat_columns`), then the
formula and the policies are expressions over them. Rows keep their order (dropped
singletons aside), input columns unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import Message
from grpo_cli.core.expressions import annotate_lazy, collect
from grpo_cli.core.plan import Plan

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

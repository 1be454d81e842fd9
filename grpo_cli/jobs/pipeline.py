"""One call from a reward log to everything a command shows: the annotated frame, the
per-group table and the run's figures."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import polars as pl

from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.errors import Message
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan
from grpo_cli.core.presets import get_preset
from grpo_cli.core.resolve import Request, derive, make_request, resolve
from grpo_cli.core.run_summary import (
    RunSummary,
    check_batch_spans,
    group_table,
    span_warnings,
    summarize_run,
)
from grpo_cli.jobs.compute import annotate_frame, pick_columns


@dataclass
class Annotation:
    """The result of :func:`annotate`: the output frame, and on demand the run's figures
    (``run``: one pass over the rows), the warnings that follow from them and the per-group
    table (``groups``: one more grouping of the key). ``--quiet`` needs none of them."""

    frame: pl.DataFrame
    full: pl.DataFrame
    plan: Plan

    @property
    def options(self) -> AdvantageOptions:
        """The options it ran with (preset, layout and explicit choices resolved)."""
        return self.plan.options

    @property
    def layout(self) -> str | None:
        """The trainer dump layout the log was read in, or None."""
        return self.plan.layout

    @property
    def engine(self) -> EngineOptions:
        """Where it ran (the plan's engine settings)."""
        return self.plan.engine

    @cached_property
    def run(self) -> RunSummary:
        """The run's figures (see :func:`grpo_cli.core.run_summary.summarize_run`)."""
        return summarize_run(self.full.lazy(), self.plan)

    @cached_property
    def warnings(self) -> tuple[Message, ...]:
        """What the user should know: what the dump layout inferred, groups that span
        steps (one more grouping of the key), and how the log fits the preset's trainer."""
        return (
            *self.plan.notes,
            *span_warnings(self.full, self.plan),
            *_warnings(self.plan.preset, self.run),
        )

    @cached_property
    def groups(self) -> pl.DataFrame:
        """One row per group: keys, size, n_null, mean, std, min, max, zero_std."""
        return group_table(self.full.lazy(), self.plan)


def annotate(
    frame: pl.DataFrame,
    preset: str | None = None,
    *,
    replace: bool = False,
    span_check: bool = True,
    **explicit: Any,
) -> Annotation:
    """Compute advantages with a preset and explicit options (engine settings among them:
    ``backend="torch"``); also the per-group table and the run's figures (see
    :func:`annotate_request`)."""
    return annotate_request(
        frame, make_request(preset, explicit), replace=replace, span_check=span_check
    )


def annotate_request(
    frame: pl.DataFrame,
    request: Request,
    *,
    replace: bool = False,
    span_check: bool = True,
    layout: str | None = None,
) -> Annotation:
    """``frame`` annotated as ``request`` asks, resolved on it once (``layout``: a dump
    layout other than the preset's); groups spanning batches refused. ``replace``: input
    columns named like an added one are recomputed in place instead of refused.
    ``span_check=False``: no ``warnings`` will be read, so no span flags are computed."""
    added = request.options.added_columns()
    replaced = [c for c in added if replace and c in frame.columns]
    source = frame.drop(replaced)
    plan = resolve(request, source, span_check=span_check, layout=layout)
    full, plan = annotate_frame(derive(source, plan), plan)
    check_batch_spans(full, plan)
    new_columns = [c for c in plan.options.added_columns() if c not in replaced]
    output = pick_columns(full, [*frame.columns, *new_columns])
    return Annotation(output, full, plan)


def _warnings(preset: str | None, run: RunSummary) -> tuple[str, ...]:
    """What the user should know about how the log fits the preset's trainer."""
    if preset is None or not get_preset(preset).fixed_groups:
        return ()
    if run.group_size_min == run.group_size_max:
        return ()
    trainer = get_preset(preset).trainer
    return (
        f"{trainer} samples groups of one fixed size; this log's groups hold "
        f"{run.group_size_min} to {run.group_size_max} responses: grpo-adv extends the "
        "trainer's NaN-aware statistics to them",
    )

"""One call from a reward log to everything a command shows: options resolved from a
preset and explicit choices, a trainer's dump layout applied, the annotated frame, the
per-group table and the run's figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from grpo_cli.compute import annotate_frame, collect
from grpo_cli.layouts import apply_layout, detect_layout
from grpo_cli.options import AdvantageOptions
from grpo_cli.presets import get_preset, merge_options
from grpo_cli.summary import RunSummary, group_table, summarize_run


@dataclass(frozen=True)
class Resolved:
    """A frame ready to compute on: layout applied, options final."""

    frame: pl.DataFrame
    options: AdvantageOptions
    derived: tuple[str, ...]
    layout: str | None


@dataclass(frozen=True)
class Annotation:
    """The result of :func:`annotate`."""

    frame: pl.DataFrame
    groups: pl.DataFrame
    run: RunSummary
    options: AdvantageOptions
    layout: str | None
    warnings: tuple[str, ...] = ()


def resolve(frame: pl.DataFrame, preset: str | None, explicit: dict[str, Any]) -> Resolved:
    """Options from ``preset`` overridden by ``explicit``, with the preset's dump layout
    applied when ``frame`` is in it."""
    fields = merge_options(preset, explicit)
    layout = get_preset(preset).layout if preset else None
    frame, fields, derived = apply_layout(frame, layout, fields, explicit.keys())
    return Resolved(
        frame=frame,
        options=AdvantageOptions(**fields),
        derived=tuple(derived),
        layout=detect_layout(frame, layout),
    )


def annotate(frame: pl.DataFrame, preset: str | None = None, **explicit: Any) -> Annotation:
    """Compute advantages with a preset and explicit options; also the per-group table and
    the run's figures."""
    resolved = resolve(frame, preset, explicit)
    options = resolved.options
    frame_full, keys = annotate_frame(resolved.frame, options)
    full = frame_full.lazy()
    groups = group_table(full, options, keys)
    run = summarize_run(full, groups, options, keys)
    output_columns = [c for c in frame.columns if c not in resolved.derived]
    output = collect(full.select(*output_columns, *options.added_columns()))
    return Annotation(output, groups, run, options, resolved.layout, _warnings(preset, run))


def _warnings(preset: str | None, run: RunSummary) -> tuple[str, ...]:
    """What the user should know about how the log fits the preset's trainer."""
    if preset is None or not get_preset(preset).fixed_groups:
        return ()
    if run.group_size_min == run.group_size_max:
        return ()
    trainer = get_preset(preset).trainer.split()[0]
    return (
        f"{trainer} samples groups of one fixed size; this log's groups hold "
        f"{run.group_size_min} to {run.group_size_max} responses: grpo-adv extends the "
        "trainer's NaN-aware statistics to them",
    )

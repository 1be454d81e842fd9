"""``compute_advantages``: a frame in memory annotated, on any engine: the plan
(:func:`grpo_cli.core.resolve.resolve`), then the engine ``backend`` names, with the one
collision fallback (:func:`grpo_cli.core.plan.run_with_fallback`). This module names no
engine."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

import polars as pl

from grpo_cli.core.engine_options import ENGINES, EngineOptions, split_engine
from grpo_cli.core.errors import OptionsError, option
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan, run_with_fallback
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.engines import FrameEngine, check, get_engine

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def compute_advantages(
    frame: FrameT,
    options: AdvantageOptions | None = None,
    *,
    engine: EngineOptions | Mapping[str, Any] | None = None,
    **overrides: Any,
) -> FrameT:
    """Annotate a reward log with group-relative advantages.

    Args:
        frame: a Polars DataFrame or LazyFrame with the columns the options name.
        options: the computation's options, taken as they are (defaults: GRPO, ddof 1,
            eps 1e-8). Without them, groups form within each step: on a frame with a
            step column (``step``, ``global_step``, ...) and no ``group_cols`` override,
            the key is (step, prompt_id), as every trainer groups.
        engine: where it runs (:class:`grpo_cli.core.engine_options.EngineOptions` or a mapping of
            its fields); default the Polars engine.
        **overrides: option fields to change, e.g. ``ddof=0, group_cols=("step", "prompt_id")``;
            the engine's (``backend="torch", device="cpu"``) are accepted here too.

    Returns:
        The same kind of frame: every input row in input order (but for dropped singleton
        groups), every input column unchanged, plus ``advantage`` (Float64; a list of
        Float64 for ``process``) and, with ``with_stats``, ``group_size`` (rows in the
        group), ``group_mean`` and ``group_std`` (over the valid rewards). A LazyFrame is
        annotated lazily, on the Polars engine, through the exact key.

    Raises:
        OptionsError: invalid options, or options the chosen engine cannot compute.
        InputError: a missing column, non-numeric rewards, a null key, a bad group size.
    """
    overrides, settings = split_engine(overrides)
    where = EngineOptions.of(engine, **settings)
    if options is None:  # the Python API takes no length column from the log unasked
        request = make_request(None, {"length_col": None, **overrides}, where)
    else:  # every field explicit: nothing inferred
        request = make_request(None, options.with_overrides(**overrides), where)
    plan: Plan = resolve(request, frame)
    names = [*frame.collect_schema().names(), *plan.options.added_columns()]
    if isinstance(frame, pl.LazyFrame):
        from grpo_cli.core.expressions import annotate_lazy

        return annotate_lazy(frame, plan).select(names)
    full, _ = annotate_frame(frame, plan)
    return pick_columns(full, names)


def annotate_frame(frame: pl.DataFrame, plan: Plan) -> tuple[pl.DataFrame, Plan]:
    """The annotated frame *with* the plan's temporary columns (for the tables built
    from it), and the plan that made it (the exact-key plan after a hash collision)."""
    chosen_engine = frame_engine(plan)
    return run_with_fallback(lambda chosen: chosen_engine.annotate(frame, chosen), plan)


def frame_engine(plan: Plan) -> FrameEngine:
    """The engine the plan names, checked against it; one that annotates frames."""
    engine = get_engine(plan.engine.backend)
    check(engine, plan)
    refuse_file_engines(engine.info.name)
    return cast(FrameEngine, engine)


def refuse_file_engines(backend: str | None, command: str | None = None) -> None:
    """The one refusal of an engine that reads and writes files itself (``partitioned``,
    ``ray``; run by :func:`grpo_cli.jobs.run.run_job`) for a log read into memory on this
    machine: by ``command`` (``verify``: before any input is read), or None: an in-memory
    frame (the Python API). An unknown or in-memory ``backend`` passes."""
    if backend is None or backend not in ENGINES or not ENGINES[backend].reads_files:
        return
    able = [name for name, info in ENGINES.items() if not info.reads_files]
    named = option("backend", backend)
    raise OptionsError(
        named + " reads and writes files, not an in-memory frame"
        if command is None
        else f"{command} reads the log on this machine: it does not take " + named,
        hint="use "
        + option("backend", able[0])
        + "".join(f" or {name}" for name in able[1:])
        + "; for logs too large for one machine, "
        + named
        + " on files writes the advantages (grpo-adv compute, grpo_cli.run_job)",
        value=backend,
    )


def pick_columns(frame: pl.DataFrame, names: Iterable[str]) -> pl.DataFrame:
    """The columns ``names`` of ``frame``, zero-copy (``select`` would copy the chunked
    columns a streaming collect leaves)."""
    return pl.DataFrame([frame.get_column(name) for name in names])

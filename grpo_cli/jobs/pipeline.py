"""One call from a reward log to everything a command shows: options resolved from a
preset and explicit choices, a trainer's dump layout applied, the annotated frame, the
per-group table and the run's figures."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from dataclasses import replace as replace_field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from grpo_cli.core.columns import COUNTER_NAME, LENGTH_NAME
from grpo_cli.core.engine_options import EngineOptions, split_engine
from grpo_cli.core.errors import Message, OptionsError, Verbatim, option
from grpo_cli.core.layouts import apply_layout, detect_layout, within_steps
from grpo_cli.core.metrics import LENGTH_COLUMNS
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan
from grpo_cli.core.presets import get_preset, merge_options
from grpo_cli.core.run_summary import (
    RunSummary,
    check_batch_spans,
    group_table,
    span_warnings,
    summarize_run,
)
from grpo_cli.jobs.compute import annotate_frame, pick_columns

if TYPE_CHECKING:
    from grpo_cli.core.estimators import Estimator


@dataclass(frozen=True)
class Resolved:
    """A frame ready to compute on: layout applied, options final, their estimator looked
    up (once: the plan takes it, see :func:`grpo_cli.core.plan.make_plan`); ``warnings``: what
    the layout filled in that the user should know (a TRL group size inferred), one line
    each."""

    frame: pl.DataFrame
    options: AdvantageOptions
    derived: tuple[str, ...]
    layout: str | None
    estimator: Estimator
    warnings: tuple[Message, ...] = ()
    engine: EngineOptions = field(default_factory=EngineOptions)


@dataclass
class Annotation:
    """The result of :func:`annotate`: the output frame, and on demand the run's figures
    (``run``: one pass over the rows), the warnings that follow from them and the per-group
    table (``groups``: one more grouping of the key). ``--quiet`` needs none of them."""

    frame: pl.DataFrame
    options: AdvantageOptions
    layout: str | None
    full: pl.DataFrame
    plan: Plan
    preset: str | None = None
    layout_warnings: tuple[Message, ...] = ()

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
            *self.layout_warnings,
            *span_warnings(self.full, self.plan),
            *_warnings(self.preset, self.run),
        )

    @cached_property
    def groups(self) -> pl.DataFrame:
        """One row per group: keys, size, n_null, mean, std, min, max, zero_std."""
        return group_table(self.full.lazy(), self.plan)


def resolve(
    frame: pl.DataFrame,
    preset: str | None,
    explicit: dict[str, Any],
    estimator: Estimator | None = None,
) -> Resolved:
    """Options from ``preset`` overridden by ``explicit``, with the preset's dump layout
    applied when ``frame`` is in it (a TRL log without ``--group-size``: G inferred from its
    runs of equal prompts, and a warning saying so), and groups within each step of a log
    with a step column unless the group key is explicit
    (:func:`grpo_cli.core.layouts.within_steps`). Their estimator is looked up here, unless the
    caller did already (``estimator``: :func:`grpo_cli.jobs.run.check_options`'s). ``explicit``
    may hold the engine settings (:data:`grpo_cli.core.engine_options.ENGINE_SETTINGS`): they become
    ``engine``."""
    explicit, settings = split_engine(explicit)
    fields = merge_options(preset, explicit)
    if estimator is None:
        from grpo_cli.core.estimators import get_estimator

        estimator = get_estimator(str(fields.get("estimator", "grpo")))
    layout = get_preset(preset).layout if preset else None
    warnings: list[Message] = []
    frame, fields, derived = apply_layout(frame, layout, fields, explicit.keys(), warnings)
    fields = within_steps(frame.columns, fields, explicit.keys())
    fields = length_from_columns(frame.schema, fields, estimator, warnings, preset, explicit)
    return Resolved(
        frame=frame,
        options=AdvantageOptions(**fields),
        derived=tuple(derived),
        layout=detect_layout(frame, layout),
        estimator=estimator,
        warnings=tuple(warnings),
        engine=EngineOptions.of(settings),
    )


def needs_length(fields: dict[str, Any], estimator: Estimator) -> bool:
    """Whether options (``fields``, whose estimator is ``estimator``) need a length column
    they do not name (opo, --token-weighted)."""
    if fields.get("length_col"):
        return False
    return "length" in estimator.needs or bool(fields.get("token_weighted"))


def length_from_columns(
    schema: pl.Schema,
    fields: dict[str, Any],
    estimator: Estimator,
    warnings: list[Message],
    preset: str | None = None,
    explicit: Collection[str] = (),
) -> dict[str, Any]:
    """Options that need a length column and name none take the log's ``length`` (or
    ``completion_length``, ``response_length``), with a warning saying so. Without one, a
    preset that weights by tokens (``token_weighted`` not among the ``explicit`` options) is
    refused here, naming the preset and a candidate column (:func:`length_candidate`);
    otherwise the options' own error asks for ``length_col``."""
    if not needs_length(fields, estimator):
        return fields
    found = next((c for c in LENGTH_COLUMNS if c in schema), None)
    if found is None:
        if (
            preset is not None
            and "length" not in estimator.needs
            and "token_weighted" not in explicit
        ):
            taken = {
                *fields.get("group_cols", ()),
                *fields.get("reward_cols", ()),
                fields.get("batch_col"),
            }
            candidate = length_candidate(schema, taken)
            raise OptionsError(
                option("preset", preset)
                + " weights batch statistics by response tokens ("
                + option("token_weighted")
                + ") and the log has no length column ("
                + ", ".join(LENGTH_COLUMNS)
                + ")",
                hint=(
                    "name the column of token counts: "
                    + option("length_col", Verbatim(candidate or "COL"))
                    + ("" if candidate else " (no numeric column here looks like one)")
                ),
            )
        return fields
    warnings.append(
        f"using the length column {found!r} (" + option("length_col") + " names another)"
    )
    return {**fields, "length_col": found}


def length_candidate(schema: pl.Schema, taken: Collection[object]) -> str | None:
    """The column of ``schema`` most likely to hold response lengths, for a hint: the first
    numeric one whose name says length or tokens (``num_tokens``, ``seq_len``), else the
    first integer one not named like an id, index, step or seed; never one in ``taken``
    (the group, reward and batch columns). None when no column fits."""
    free = [(name, dtype) for name, dtype in schema.items() if name not in taken]
    named = (n for n, d in free if d.is_numeric() and LENGTH_NAME.search(n))
    counts = (n for n, d in free if d.is_integer() and not COUNTER_NAME.search(n))
    return next(named, None) or next(counts, None)


def annotate(
    frame: pl.DataFrame,
    preset: str | None = None,
    *,
    replace: bool = False,
    span_check: bool = True,
    looked_up: Estimator | None = None,
    engine: EngineOptions | None = None,
    **explicit: Any,
) -> Annotation:
    """Compute advantages with a preset and explicit options; also the per-group table and
    the run's figures. Groups that span several values of the batch column are refused
    (see :func:`grpo_cli.core.run_summary.check_batch_spans`). ``replace``: input columns named
    like an added column (a trainer dump's own ``advantage``) are recomputed in place
    (same position) instead of refused. ``span_check=False``: the caller will not read
    ``warnings``, so the engine need not flag groups that span steps on the way.
    ``looked_up``: the options' estimator, when the caller looked it up already (see
    :func:`grpo_cli.jobs.run.check_options`); ``engine``: where it runs (or its settings among
    ``explicit``: ``backend="torch"``)."""
    resolved = resolve(frame, preset, explicit, looked_up)
    if engine is not None:
        resolved = replace_field(resolved, engine=engine)
    options = resolved.options
    added = options.added_columns()
    replaced = [c for c in added if replace and c in resolved.frame.columns]
    full, plan = annotate_frame(
        resolved.frame.drop(replaced),
        options,
        resolved.engine,
        span_check=span_check,
        estimator=resolved.estimator,
    )
    check_batch_spans(full, plan)
    output_columns = [c for c in frame.columns if c not in resolved.derived]
    new_columns = [c for c in added if c not in replaced]
    output = pick_columns(full, [*output_columns, *new_columns])
    return Annotation(output, options, resolved.layout, full, plan, preset, resolved.warnings)


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

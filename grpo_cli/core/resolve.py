"""One resolution per job: what the user asked (:class:`Request`, checked without data),
then everything the log decides (:func:`resolve`, once, on its schema or frame): the dump
layout and the fields it fills in, the step, length and reward columns, the final options,
the keys and the input checks. Every command and engine runs from the
:class:`~grpo_cli.core.plan.Plan` it returns (workers and Ray tasks receive it pickled).
Only the user's columns are candidates for a role, never one grpo-adv adds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any

import polars as pl

from grpo_cli.core.columns import COUNTER_NAME, LENGTH_NAME, STEP_COLUMNS, user_columns
from grpo_cli.core.engine_options import ENGINES, EngineOptions, split_engine
from grpo_cli.core.errors import Message, OptionsError, Verbatim, option
from grpo_cli.core.estimators import Estimator, get_estimator
from grpo_cli.core.layouts import apply_layout, derived_column, detect_layout, within_steps
from grpo_cli.core.metrics import LENGTH_COLUMNS
from grpo_cli.core.options import DEFAULT_GROUP_COLS, AdvantageOptions
from grpo_cli.core.plan import Plan, resolve_keys, step_column
from grpo_cli.core.presets import get_preset, merge_options
from grpo_cli.core.rewards import combined_reward
from grpo_cli.core.schema import check_frame


@dataclass(frozen=True)
class Request:
    """What the user asked, checked without data (see :func:`make_request`).

    Attributes:
        preset: the trainer preset, or None.
        explicit: the option fields the caller named (over the preset's).
        fields: the preset's fields overridden by ``explicit``.
        options: ``fields`` as options, before the log fills in any (for the engines'
            refusals, which need no data: see :func:`grpo_cli.engines.check`); their role
            checks wait for :func:`resolve` unless ``roles_checked``.
        roles_checked: the caller named the reward and group columns (or the group
            size), so the role checks ran on the request.
        estimator: the estimator ``fields`` name, looked up once.
        engine: where the job runs.
    """

    preset: str | None
    explicit: Mapping[str, Any]
    fields: Mapping[str, Any]
    options: AdvantageOptions
    estimator: Estimator
    engine: EngineOptions
    roles_checked: bool

    def given(self, name: str) -> bool:
        """Whether the caller named option ``name``."""
        return name in self.explicit

    @property
    def key_cols(self) -> tuple[str, ...]:
        """The group key columns asked for (read as strings from CSV)."""
        return tuple(self.fields.get("group_cols", DEFAULT_GROUP_COLS))

    @property
    def layout(self) -> str | None:
        """The dump layout of the preset's trainer, or None."""
        return get_preset(self.preset).layout if self.preset else None


def make_request(
    preset: str | None = None,
    options: AdvantageOptions | Mapping[str, Any] | None = None,
    engine: EngineOptions | Mapping[str, Any] | None = None,
    *,
    refuse: Callable[[Estimator], None] | None = None,
) -> Request:
    """The :class:`Request` of ``preset`` and ``options`` (an :class:`AdvantageOptions`:
    every field explicit, nothing inferred; a mapping: those fields over the preset's,
    which may hold engine settings such as ``backend``) on ``engine``. Checks everything
    that needs no data, once: unknown options, bad values, the estimator's name and what it
    needs of the other options. The checks of the roles the log may fill in (group, reward
    and length columns, one reward weight per reward column) wait for :func:`resolve`
    unless the caller named them (given whole, the options were checked when made).
    ``refuse``: the caller's own refusal of the estimator (explain: process supervision),
    run before the options' checks so that its message comes first."""
    given = None
    if isinstance(options, AdvantageOptions):
        given = options
        options = {f.name: getattr(given, f.name) for f in fields(given)}
    explicit, settings = split_engine(options or {})
    if "reward_col" in explicit:  # reward_col="score": reward_cols=("score",)
        explicit["reward_cols"] = explicit.pop("reward_col")
    where = EngineOptions.of(engine, **settings)
    merged = merge_options(preset, explicit)
    estimator = get_estimator(str(merged.get("estimator", "grpo")))
    if refuse is not None:
        refuse(estimator)
    # the roles are final once the caller names them; else the log fills them in (resolve)
    fixed = "reward_cols" in explicit and ("group_cols" in explicit or "group_size" in explicit)
    unknown = sorted(set(merged) - {f.name for f in fields(AdvantageOptions)})
    if unknown:
        AdvantageOptions().with_overrides(**dict.fromkeys(unknown))  # refused, named
    asked = given or AdvantageOptions(**merged, check_roles=fixed)
    asked.check_estimator_needs(estimator, roles=False)
    return Request(
        preset=preset,
        explicit=MappingProxyType(dict(explicit)),
        fields=MappingProxyType(merged),
        options=asked,
        estimator=estimator,
        engine=where,
        roles_checked=fixed,
    )


def resolve(
    request: Request,
    data: pl.DataFrame | pl.LazyFrame | pl.Schema,
    *,
    span_check: bool = True,
    layout: str | None = None,
    checks: bool = True,
) -> Plan:
    """Everything the log decides, once (see the module docstring). ``data``: the frame
    (its values checked, its nulls and step column looked at, a TRL group size inferred
    from its rows), a LazyFrame (its values checked) or a file's schema (the engine
    checks the values as it reads them; a positional TRL log is refused: an engine that
    takes rows in no order cannot form its groups). ``layout``: the dump layout to read
    the log in, when not the preset's (compare's shared one). ``span_check=False``: the
    caller reads no span warnings. ``checks=False``: the roles only, nothing checked (for
    a hint naming the log's other columns before it is refused).

    Raises:
        OptionsError, InputError: options the log cannot satisfy, a bad log.
    """
    in_memory = isinstance(data, pl.DataFrame)
    if isinstance(data, pl.DataFrame):
        frame = data
    else:
        schema = data.collect_schema() if isinstance(data, pl.LazyFrame) else data
        frame = pl.DataFrame(schema=schema)
    explicit = request.explicit.keys()
    found = detect_layout(frame.columns, layout or request.layout)
    positional = "group_cols" not in explicit and "group_size" not in explicit
    if found == "trl" and positional and not in_memory:
        name = option("backend", request.engine.backend, alias="alone")
        raise OptionsError(
            name + " does not support a TRL completions log (its groups are "
            "num_generations consecutive rows, which need the rows in order)",
            hint="drop " + name + ": the default engine infers num_generations from the log",
        )
    notes: list[Message] = []
    frame, laid, derived = apply_layout(frame, found, dict(request.fields), explicit, notes)
    sort_rewards = request.preset is not None and get_preset(request.preset).sort_rewards
    if sort_rewards and isinstance(laid.get("reward_cols"), list | tuple):
        laid["reward_cols"] = tuple(sorted(laid["reward_cols"]))  # the weights follow this order
    step_col = next((c for c in STEP_COLUMNS if c in user_columns(frame.columns)), None)
    laid = within_steps(step_col, laid, explicit)
    laid = _length_column(frame.schema, laid, request, notes)
    asked = request.fields
    filled = {k: v for k, v in laid.items() if k not in asked or asked[k] != v}
    options = request.options.with_roles(check=checks and not request.roles_checked, **filled)
    estimator = request.estimator
    if checks:
        options.check_estimator_needs(estimator, roles=True)
    hashed = (
        in_memory
        and ENGINES[request.engine.backend].io == "frame"
        and estimator.uses_groups
        and estimator.unit == "response"
    )
    plan = Plan(
        options,
        estimator,
        resolve_keys(options, hashed=hashed),
        engine=request.engine,
        preset=request.preset,
        layout=found,
        step_col=step_col,
        derived=tuple(derived),
        notes=tuple(notes),
    )
    if not checks:
        return plan
    checked = data if isinstance(data, pl.LazyFrame) and not derived else frame
    check_frame(checked, options, estimator, values=not isinstance(data, pl.Schema))
    if in_memory and options.singleton != "drop" and estimator.unit != "step":
        step = step_column(plan) if span_check else None
        if step is not None and not frame.schema[step].is_integer():
            step = None  # other steps: summary._pairs_outnumber_groups checks them
        counts = frame.select(
            combined_reward(options).is_null().any().alias("nulls"),
            (pl.col(step).null_count() if step else pl.lit(1)).alias("step_nulls"),
        ).row(0)
        plan = replace(plan, has_nulls=bool(counts[0]), span_col=step if not counts[1] else None)
    return plan


def derive(frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """``frame`` with the key columns the plan's dump layout derives."""
    if not plan.derived:
        return frame
    return frame.with_columns(derived_column(name) for name in plan.derived)


def _length_column(
    schema: pl.Schema, fields: dict[str, Any], request: Request, notes: list[Message]
) -> dict[str, Any]:
    """Options that need a length column and name none take the log's ``length`` (or
    ``completion_length``, ``response_length``), with a note saying so. Without one, a
    preset that weights by tokens (``token_weighted`` not explicit) is refused here, naming
    the preset and a candidate column (:func:`length_candidate`); otherwise the options'
    own error asks for ``length_col``."""
    estimator = request.estimator
    needed = "length" in estimator.needs or bool(fields.get("token_weighted"))
    if fields.get("length_col") or request.given("length_col") or not needed:
        return fields
    columns = user_columns(schema)
    found = next((c for c in LENGTH_COLUMNS if c in columns), None)
    if found is not None:
        notes.append(
            f"using the length column {found!r} (" + option("length_col") + " names another)"
        )
        return {**fields, "length_col": found}
    by_preset = request.preset is not None and not request.given("token_weighted")
    if by_preset and "length" not in estimator.needs:
        taken = {
            *fields.get("group_cols", ()),
            *fields.get("reward_cols", ()),
            fields.get("batch_col"),
        }
        candidate = length_candidate(schema, taken)
        raise OptionsError(
            option("preset", request.preset)
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


def length_candidate(schema: pl.Schema, taken: Collection[object]) -> str | None:
    """The column of ``schema`` most likely to hold response lengths, for a hint: the first
    numeric one whose name says length or tokens (``num_tokens``, ``seq_len``), else the
    first integer one not named like an id, index, step or seed; never one in ``taken``
    (the group, reward and batch columns) nor one grpo-adv adds. None when no column fits."""
    free = [(n, schema[n]) for n in user_columns(schema) if n not in taken]
    named = (n for n, d in free if d.is_numeric() and LENGTH_NAME.search(n))
    counts = (n for n, d in free if d.is_integer() and not COUNTER_NAME.search(n))
    return next(named, None) or next(counts, None)

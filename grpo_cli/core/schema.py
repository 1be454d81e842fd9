"""Every input check, with a hint that says how to fix a mismatch: which columns play which
role, their types, null keys, infinite or huge rewards, positional group sizes.

:func:`check_frame` runs them all once, when the plan is made
(:func:`grpo_cli.core.resolve.resolve`); no engine checks again.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import polars as pl

from grpo_cli.core.columns import user_columns
from grpo_cli.core.errors import InputError, OptionRef, option
from grpo_cli.core.layouts import detect_layout
from grpo_cli.core.rewards import reward_expr

if TYPE_CHECKING:
    from grpo_cli.core.estimators import Estimator
    from grpo_cli.core.options import AdvantageOptions

# Rewards at or beyond this magnitude are refused: sums of squared deviations of 1e9 of them
# would overflow float64 (and the advantages silently become 0).
MAX_ABS_REWARD: Final = 1e140


# Column roles -> the option that names them (for hints).
ROLE_OPTIONS: Final[dict[str, OptionRef]] = {
    "group": option("group_cols"),
    "reward": option("reward_cols"),
    "batch": option("batch_col"),
    "length": option("length_col"),
    "baseline": option("baseline_col"),
    "step rewards": option("step_rewards_col"),
    "advantage": option("advantage_col"),
}
# The options that take several columns (an example names one: ``group_cols=("id",)``).
_SEVERAL: Final = ("group_cols", "reward_cols")
# The trainer dumps a hint names (see :mod:`grpo_cli.core.layouts`), by preset.
_DUMPS: Final = {"verl": "verl rollout", "trl": "TRL completions"}


def require_columns(schema: pl.Schema, columns: Sequence[str], role: str) -> None:
    """Raise an InputError naming the file's columns when one of ``columns`` is missing."""
    available = user_columns(schema.names())
    for column in columns:
        if column in schema:
            continue
        shown = ", ".join(available[:20]) + (" ..." if len(available) > 20 else "")
        close = difflib.get_close_matches(column, available, n=1, cutoff=0.5)
        named = ROLE_OPTIONS[role]
        fitting = [name for name in available if _fits_role(schema[name], role)]
        fitting.sort(key=lambda name: not _prefers(schema[name], role))
        suggestion = (close or fitting or ["NAME"])[0]
        names = schema.names()
        dump = next((d for d in _DUMPS if "prompt_id" not in names and detect_layout(names, d)), "")
        example = (suggestion,) if named.keyword in _SEVERAL else suggestion
        hint = (
            f"this looks like a {_DUMPS[dump]} dump: use " + option("preset", dump)
            if dump and role in ("group", "reward")
            else f"choose the {role} column with "
            + named
            + ", e.g. "
            + option(named.keyword, example)
        )
        raise InputError(
            f"{role} column {column!r} not found; the input has columns: {shown}",
            hint=hint,
            column=column,
        )


def _fits_role(dtype: pl.DataType, role: str) -> bool:
    """Whether a column of ``dtype`` could play ``role`` (used to suggest a column)."""
    if role in ("reward", "length", "baseline", "advantage"):
        return dtype.is_numeric()
    if role in ("group", "batch"):
        return dtype == pl.String or dtype.is_integer()
    return True


def _prefers(dtype: pl.DataType, role: str) -> bool:
    """Among fitting columns, the likelier kind: floats for rewards, text for keys."""
    return dtype.is_float() if role in ("reward", "advantage") else dtype == pl.String


def check_numeric_dtype(schema: pl.Schema, column: str, role: str = "reward") -> None:
    """``column`` must hold numbers (integers, floats, decimals) or booleans (read as 0/1)."""
    dtype = schema[column]
    if dtype.is_numeric() or dtype == pl.Boolean or dtype == pl.Null:
        return
    raise InputError(
        f"{role} column {column!r} holds {dtype} values, not numbers",
        hint=f"{role}s must be numeric; check "
        + ROLE_OPTIONS.get(role, "the column")
        + ", or convert the column",
        column=column,
    )


def check_list_dtype(schema: pl.Schema, column: str) -> None:
    """``column`` must be a list of numbers (per-step rewards)."""
    dtype = schema[column]
    if isinstance(dtype, pl.List) and (dtype.inner.is_numeric() or dtype.inner == pl.Null):
        return
    raise InputError(
        f"step rewards column {column!r} holds {dtype} values, not lists of numbers",
        hint="give one list of per-step rewards per response, e.g. [0.1, 0.0, 1.0]",
    )


NULL_SPELLINGS: Final = frozenset({"none", "null", "nil", "na", "n/a", "missing", "-"})
"""Text that a log writer meant as a missing value (Python's ``None``, ``null``, ``N/A``):
compared without case or surrounding spaces."""


def describe_bad_reward(frame: pl.DataFrame, exc: InputError, column: str) -> None:
    """Add to ``exc`` (a reward column of text) its first value that is not a number, as an
    example: `` (row 2: 'abc')`` (rows count from 0 in the order read, as ``explain --row``
    and ``--diff-out`` do); a value that spells a missing one (``None``, ``null``, ``N/A``:
    :data:`NULL_SPELLINGS`) gets the hint that says how a missing reward is written."""
    series = frame.get_column(column)
    if series.dtype != pl.String:
        return
    as_float = series.cast(pl.Float64, strict=False)
    bad = series.is_not_null() & as_float.is_null() & ~series.is_in(("true", "false"))
    if not bad.any():
        return
    index = int(bad.arg_true()[0])
    value = series[index]
    exc.text += f" (row {index}: {value!r})"
    if value.strip().lower() in NULL_SPELLINGS:
        exc.hint_text = (
            f"a missing reward is an empty CSV cell, NaN or JSON null, not the text {value!r}: "
            "write missing rewards that way (" + option("nulls") + " says what they get)"
        )


def check_frame(
    frame: pl.DataFrame | pl.LazyFrame,
    options: AdvantageOptions,
    estimator: Estimator,
    *,
    values: bool = True,
) -> None:
    """Every check of ``frame`` against ``options``: the columns needed and their types,
    no added column already there, null keys, infinite or huge rewards, positional groups
    dividing every batch. ``values=False``: the value checks are left to an engine that
    makes them as it reads (:func:`value_checks`); never from a Parquet footer's
    statistics (a footer can say anything)."""
    schema = frame.collect_schema()
    if estimator.uses_groups and options.group_size is None:
        require_columns(schema, options.group_cols, "group")
    for role, column in (
        ("batch", options.batch_col),
        ("length", options.length_col),
        ("baseline", options.baseline_col),
        ("step rewards", options.step_rewards_col),
    ):
        if column is not None:
            require_columns(schema, [column], role)
    if options.step_rewards_col is not None and estimator.unit == "step":
        check_list_dtype(schema, options.step_rewards_col)
    else:
        require_columns(schema, options.reward_cols, "reward")
        for column in options.reward_cols:
            _check_reward_column(frame, schema, column)
    for role, column in (("length", options.length_col), ("baseline", options.baseline_col)):
        if column is not None:
            check_numeric_dtype(schema, column, role)
    check_added_columns(schema, options)
    if values:
        _check_values(frame, options, estimator.uses_groups)
    _check_group_size(frame, options)


def check_added_columns(columns: Collection[str], options: AdvantageOptions) -> None:
    """Refuse an input that already has a column the run adds (``advantage``, the
    ``with_stats`` columns): writing would overwrite it, which only ``replace`` asks
    for."""
    existing = [col for col in options.added_columns() if col in columns]
    if existing:
        raise InputError(
            f"the input already has a column named {existing[0]!r}",
            hint="pass "
            + option("replace", True)
            + " to overwrite it (a trainer's dump logs its own), or name the output column with "
            + option("advantage_col"),
            column=existing[0],
        )


def _check_reward_column(
    frame: pl.DataFrame | pl.LazyFrame, schema: pl.Schema, column: str
) -> None:
    """Rewards are numbers or booleans (0/1); text is accepted when every value is a
    number written as text (``"1.0"``, as some JSON logs hold them)."""
    if schema[column] == pl.String and _all_parse_as_numbers(frame, column):
        return
    try:
        check_numeric_dtype(schema, column, "reward")
    except InputError as exc:
        if isinstance(frame, pl.DataFrame):
            describe_bad_reward(frame, exc, column)
        raise


def _all_parse_as_numbers(frame: pl.DataFrame | pl.LazyFrame, column: str) -> bool:
    text = pl.col(column)
    unparsed = (text.is_not_null() & text.cast(pl.Float64, strict=False).is_null()).sum()
    return int(frame.lazy().select(unparsed).collect(engine="streaming").item()) == 0


def key_columns(options: AdvantageOptions, uses_groups: bool) -> list[str]:
    """The columns no row may leave null: the group key (keyed groups) and the batch key."""
    key_cols = list(options.group_cols) if uses_groups and options.group_size is None else []
    if options.batch_col:
        key_cols.append(options.batch_col)
    return key_cols


def value_checks(
    options: AdvantageOptions,
    uses_groups: bool,
    schema: pl.Schema,
    *,
    group_key_null: pl.Expr | None = None,
) -> dict[str, pl.Expr]:
    """Integer-count expressions over the rows, by name: ``keys`` (rows with a null group
    or batch key), ``rewards`` (null or NaN rewards, under ``--nulls error``),
    ``infinite`` and ``huge`` (rewards of magnitude MAX_ABS_REWARD or more); counts of 0
    mean nothing to refuse (:func:`refuse_values`). ``group_key_null``: a per-row flag of a
    null group key, for an engine that holds a hash of the key instead of its columns."""
    checks: dict[str, pl.Expr] = {}
    key_cols = key_columns(options, uses_groups)
    flags = [pl.col(c).is_null() for c in key_cols if c in schema]
    if group_key_null is not None:
        flags = [group_key_null] + (
            [pl.col(options.batch_col).is_null()] if options.batch_col else []
        )
    if flags:
        checks["keys"] = pl.any_horizontal(*flags).sum()
    rewards = [
        reward_expr(c)
        for c in options.reward_cols
        if c in schema and not isinstance(schema[c], pl.List)
    ]
    if options.nulls == "error" and rewards:
        checks["rewards"] = pl.any_horizontal(*(r.is_null() for r in rewards)).sum()
    if rewards:
        checks["infinite"] = pl.any_horizontal(*(r.is_infinite() for r in rewards)).sum()
        checks["huge"] = pl.any_horizontal(
            *((r.abs() >= MAX_ABS_REWARD) & r.is_finite() for r in rewards)
        ).sum()
    return checks


def refuse_values(counts: Mapping[str, int], options: AdvantageOptions, uses_groups: bool) -> None:
    """Raise the InputError of the first non-zero count of :func:`value_checks`, in its
    order (keys, null rewards, infinite, huge)."""
    if counts.get("keys"):
        key_cols = key_columns(options, uses_groups)
        raise InputError(
            f"{counts['keys']} row(s) have a null group or batch key ({', '.join(key_cols)})",
            hint="every response needs the id of its prompt; fill or drop those rows first",
        )
    if counts.get("rewards"):
        raise InputError(
            f"{counts['rewards']} row(s) have a null or NaN reward ("
            + option("nulls", "error")
            + ")",
            hint="choose " + option("nulls", "exclude") + ", zero or fill_zero to accept them",
        )
    columns = ", ".join(options.reward_cols)
    if counts.get("infinite"):
        raise InputError(
            f"{counts['infinite']} row(s) have an infinite reward ({columns})",
            hint="rewards must be finite: clip them, or make them null to leave those rows out",
        )
    if counts.get("huge"):
        raise InputError(
            f"{counts['huge']} row(s) have a reward of magnitude {MAX_ABS_REWARD:g} or more "
            f"({columns}): their squares overflow float64",
            hint="rescale the rewards (advantages do not depend on the scale, up to eps)",
        )


def _check_values(
    frame: pl.DataFrame | pl.LazyFrame, options: AdvantageOptions, uses_groups: bool
) -> None:
    checks = value_checks(options, uses_groups, frame.collect_schema())
    if not checks:
        return
    # Integer counts: the streaming engine keeps a huge scanned log out of memory.
    counts = frame.lazy().select(**checks).collect(engine="streaming").row(0, named=True)
    refuse_values(counts, options, uses_groups)


def _check_group_size(frame: pl.DataFrame | pl.LazyFrame, options: AdvantageOptions) -> None:
    """Positional groups need every batch to hold a whole number of groups."""
    if options.group_size is None:
        return
    lazy = frame.lazy()
    if options.batch_col:
        sizes = lazy.group_by(options.batch_col, maintain_order=True).agg(rows=pl.len())
    else:
        sizes = lazy.select(rows=pl.len())
    bad = sizes.filter(pl.col("rows") % options.group_size != 0).collect(engine="in-memory")
    if bad.height:
        where = (
            f"{options.batch_col}={bad[options.batch_col][0]}" if options.batch_col else "the input"
        )
        raise InputError(
            f"{where} has {bad['rows'][0]} rows, not a multiple of "
            + option("group_size", options.group_size),
            hint="positional groups are consecutive runs of "
            + option("group_size")
            + " rows; check the value (the trainer's num_generations) or give "
            + option("group_cols"),
            value=options.group_size,
        )

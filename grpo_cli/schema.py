"""Every input check, with a hint that says how to fix a mismatch: which columns play which
role, their types, null keys, infinite or huge rewards, positional group sizes.

:func:`check_frame` runs them all once, when the plan is made (:func:`grpo_cli.plan.make_plan`);
no engine checks again.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import polars as pl

from grpo_cli.errors import InputError
from grpo_cli.rewards import reward_expr

if TYPE_CHECKING:
    from grpo_cli.estimators import Estimator
    from grpo_cli.options import AdvantageOptions

# Rewards at or beyond this magnitude are refused: sums of squared deviations of 1e9 of them
# would overflow float64 (and the advantages silently become 0).
MAX_ABS_REWARD: Final = 1e140


@dataclass(frozen=True)
class FooterStats:
    """What a Parquet file's footer says of one column over all its row groups: its null
    count (exact), and its smallest and largest value (None unless numeric; NaN is in
    neither). Checks use them only to skip a pass that would find nothing wrong."""

    nulls: int
    low: float | None = None
    high: float | None = None

    def bounded(self) -> bool:
        """Every value is finite and below MAX_ABS_REWARD in magnitude."""
        ends = (self.low, self.high)
        return all(v is not None and math.isfinite(v) and abs(v) < MAX_ABS_REWARD for v in ends)


# Column roles -> the CLI flag that sets them (for hints).
ROLE_FLAGS = {
    "group": "--group-col",
    "reward": "--reward-col",
    "batch": "--batch-col",
    "length": "--length-col",
    "baseline": "--baseline-col",
    "step rewards": "--step-rewards-col",
    "advantage": "--advantage-col",
}


def require_columns(schema: pl.Schema, columns: Sequence[str], role: str) -> None:
    """Raise an InputError naming the file's columns when one of ``columns`` is missing."""
    available = [name for name in schema.names() if not name.startswith("__grpo_")]
    for column in columns:
        if column in schema:
            continue
        shown = ", ".join(available[:20]) + (" ..." if len(available) > 20 else "")
        close = difflib.get_close_matches(column, available, n=1, cutoff=0.5)
        flag = ROLE_FLAGS.get(role, "--" + role)
        fitting = [name for name in available if _fits_role(schema[name], role)]
        fitting.sort(key=lambda name: not _prefers(schema[name], role))
        suggestion = (close or fitting or ["NAME"])[0]
        dump = _trainer_dump(schema.names())
        hint = (
            f"this looks like a {dump[0]} dump: use --preset {dump[1]}"
            if dump is not None and role in ("group", "reward")
            else f"choose the {role} column with {flag}, e.g. {flag} {suggestion}"
        )
        raise InputError(
            f"{role} column {column!r} not found; the input has columns: {shown}", hint=hint
        )


def _trainer_dump(columns: Sequence[str]) -> tuple[str, str] | None:
    """(what, preset) when ``columns`` are those of a trainer dump grpo-adv reads (see
    :mod:`grpo_cli.layouts`): a verl rollout dump or a TRL completions table."""
    names = set(columns)
    if "score" in names and ({"uid", "input"} & names) and "prompt_id" not in names:
        return "verl rollout", "verl"
    if {"step", "prompt", "completion"} <= names and "prompt_id" not in names:
        return "TRL completions", "trl"
    return None


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
        hint=f"{role}s must be numeric; check {ROLE_FLAGS.get(role, 'the column')}, "
        "or convert the column",
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


def describe_bad_reward(frame: pl.DataFrame, column: str) -> str:
    """A short example of a non-numeric reward value, for error messages: ``row 3: 'abc'``."""
    series = frame.get_column(column)
    if series.dtype != pl.String:
        return ""
    as_float = series.cast(pl.Float64, strict=False)
    bad = series.is_not_null() & as_float.is_null()
    if not bad.any():
        return ""
    index = int(bad.arg_true()[0])
    return f" (row {index + 1}: {series[index]!r})"


def check_frame(
    frame: pl.DataFrame | pl.LazyFrame,
    options: AdvantageOptions,
    estimator: Estimator,
    footer: Mapping[str, FooterStats] | None = None,
) -> None:
    """Every check of ``frame`` against ``options``: the columns the options need and their
    types, that no added column already exists, null keys, infinite or huge rewards, and
    that positional groups divide every batch. ``footer``: the statistics of a Parquet
    file's columns (:func:`grpo_cli.io.parquet_footer_stats`), which spare a scanned log
    the pass over its keys and rewards when they show nothing to refuse."""
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
    existing = [col for col in options.added_columns() if col in schema]
    if existing:
        raise InputError(
            f"the input already has a column named {existing[0]!r}",
            hint="pass --replace to overwrite it (a trainer's dump logs its own), or name the "
            "output column with --advantage-col",
        )
    _check_nulls(frame, options, estimator.uses_groups, footer or {})
    _check_group_size(frame, options)


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
            exc.message += describe_bad_reward(frame, column)
            exc.args = (exc.message,)
        raise


def _all_parse_as_numbers(frame: pl.DataFrame | pl.LazyFrame, column: str) -> bool:
    text = pl.col(column)
    unparsed = (text.is_not_null() & text.cast(pl.Float64, strict=False).is_null()).sum()
    return int(frame.lazy().select(unparsed).collect(engine="streaming").item()) == 0


def _check_nulls(
    frame: pl.DataFrame | pl.LazyFrame,
    options: AdvantageOptions,
    uses_groups: bool,
    footer: Mapping[str, FooterStats],
) -> None:
    key_cols = list(options.group_cols) if uses_groups and options.group_size is None else []
    if options.batch_col:
        key_cols.append(options.batch_col)
    checks = {}
    keys_clean = all(c in footer and footer[c].nulls == 0 for c in key_cols)
    if key_cols and not keys_clean:
        checks["keys"] = pl.any_horizontal(*(pl.col(c).is_null() for c in key_cols)).sum()
    schema = frame.collect_schema()
    rewards = [
        reward_expr(c)
        for c in options.reward_cols
        if c in schema and not isinstance(schema[c], pl.List)
    ]
    if options.nulls == "error" and rewards:
        checks["rewards"] = pl.any_horizontal(*(r.is_null() for r in rewards)).sum()
    rewards_bounded = all(c in footer and footer[c].bounded() for c in options.reward_cols)
    if rewards and not rewards_bounded:
        checks["infinite"] = pl.any_horizontal(*(r.is_infinite() for r in rewards)).sum()
        checks["huge"] = pl.any_horizontal(
            *((r.abs() >= MAX_ABS_REWARD) & r.is_finite() for r in rewards)
        ).sum()
    if not checks:
        return
    # Integer counts: the streaming engine keeps a huge scanned log out of memory.
    counts = frame.lazy().select(**checks).collect(engine="streaming").row(0, named=True)
    if counts.get("keys"):
        raise InputError(
            f"{counts['keys']} row(s) have a null group or batch key ({', '.join(key_cols)})",
            hint="every response needs the id of its prompt; fill or drop those rows first",
        )
    if counts.get("rewards"):
        raise InputError(
            f"{counts['rewards']} row(s) have a null or NaN reward (--nulls error)",
            hint="choose --nulls exclude, zero or fill_zero to accept them",
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
            f"{where} has {bad['rows'][0]} rows, not a multiple of --group-size "
            f"{options.group_size}",
            hint="positional groups are consecutive runs of --group-size rows; check the "
            "value (the trainer's num_generations) or give --group-col",
        )

"""Which columns play which role, and checks that say how to fix a mismatch."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import polars as pl

from grpo_cli.errors import InputError

# Column roles -> the CLI flag that sets them (for hints).
ROLE_FLAGS = {"group": "--group-col", "reward": "--reward-col"}


def require_columns(schema: pl.Schema, columns: Sequence[str], role: str) -> None:
    """Raise an InputError naming the file's columns when one of ``columns`` is missing."""
    available = list(schema.names())
    for column in columns:
        if column in schema:
            continue
        shown = ", ".join(available[:20]) + (" ..." if len(available) > 20 else "")
        close = difflib.get_close_matches(column, available, n=1, cutoff=0.5)
        flag = ROLE_FLAGS.get(role, "--" + role)
        fitting = [name for name in available if _fits_role(schema[name], role)]
        fitting.sort(key=lambda name: schema[name] != pl.String)
        suggestion = (close or fitting or ["NAME"])[0]
        raise InputError(
            f"{role} column {column!r} not found; the input has columns: {shown}",
            hint=f"choose the {role} column with {flag}, e.g. {flag} {suggestion}",
        )


def _fits_role(dtype: pl.DataType, role: str) -> bool:
    """Whether a column of ``dtype`` could play ``role`` (used to suggest a column)."""
    if role == "reward":
        return dtype.is_float()
    if role == "group":
        return dtype == pl.String or dtype.is_integer()
    return True


def check_reward_dtype(schema: pl.Schema, column: str) -> None:
    """Rewards must be numbers (integers, floats, decimals) or booleans (read as 0/1)."""
    dtype = schema[column]
    if dtype.is_numeric() or dtype == pl.Boolean or dtype == pl.Null:
        return
    raise InputError(
        f"reward column {column!r} holds {dtype} values, not numbers",
        hint="rewards must be numeric; check --reward-col, or convert the column",
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

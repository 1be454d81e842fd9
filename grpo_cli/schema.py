"""Which columns play which role, and checks that say how to fix a mismatch."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import polars as pl

from grpo_cli.errors import InputError

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
        raise InputError(
            f"{role} column {column!r} not found; the input has columns: {shown}",
            hint=f"choose the {role} column with {flag}, e.g. {flag} {suggestion}",
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

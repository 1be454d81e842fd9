"""``verify``: recompute advantages and compare them with the ones a trainer logged.

Agreement is per row: ``|stored - recomputed| <= tol``; two nulls (or NaNs) agree, a null
against a number does not. A list-valued advantage (process supervision) is compared
element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from grpo_cli.columns import RECOMPUTED_KEY as RECOMPUTED
from grpo_cli.compute import annotate_frame
from grpo_cli.engines.polars import collect
from grpo_cli.errors import InputError, OptionsError
from grpo_cli.options import AdvantageOptions
from grpo_cli.pipeline import resolve
from grpo_cli.schema import require_columns
from grpo_cli.summary import DISPLAY_NAMES, check_batch_spans, span_warnings


@dataclass(frozen=True)
class VerifyReport:
    """How a logged advantage column compares with the recomputed one.

    Attributes:
        rows: rows compared (list elements for list columns).
        groups: groups in the log.
        max_abs_diff: the largest absolute difference (inf where a null meets a number).
        rows_over: rows whose difference exceeds ``tol``.
        groups_over: groups holding at least one such row.
        worst: the groups with the largest differences: keys, size, max_abs_diff.
        tol: the tolerance.
        options: the options the advantages were recomputed with.
        layout: the trainer dump layout the log was read as, if any.
        warnings: what the user should know (groups that span steps), one line each.
    """

    rows: int
    groups: int
    max_abs_diff: float
    rows_over: int
    groups_over: int
    worst: pl.DataFrame
    tol: float
    options: AdvantageOptions
    layout: str | None
    warnings: tuple[str, ...] = ()

    @property
    def agree(self) -> bool:
        return self.rows_over == 0


def verify_advantages(
    frame: pl.DataFrame,
    preset: str | None = None,
    *,
    advantage_col: str = "advantage",
    tol: float = 1e-5,
    top: int = 5,
    warn: bool = True,
    **explicit: Any,
) -> VerifyReport:
    """Recompute with ``preset`` and ``explicit`` options; compare with ``advantage_col``.

    Groups that span several values of the batch column are refused; with ``warn``, groups
    that span the log's step column give a warning (one more grouping of the key)."""
    if not tol >= 0:
        raise OptionsError(f"--tol must be >= 0, got {tol}", hint="e.g. --tol 1e-5")
    require_columns(frame.schema, [advantage_col], "advantage")
    stored_type = frame.schema[advantage_col]
    is_list = isinstance(stored_type, pl.List)
    inner = stored_type.inner if isinstance(stored_type, pl.List) else stored_type
    if not inner.is_numeric():
        raise InputError(
            f"advantage column {advantage_col!r} holds {stored_type} values, not numbers",
            hint="name the logged advantage column with --advantage-col",
        )
    resolved = resolve(frame.drop(advantage_col), preset, {**explicit, "advantage_col": RECOMPUTED})
    full, keys = annotate_frame(resolved.frame.with_columns(frame[advantage_col]), resolved.options)
    check_batch_spans(full, resolved.options, keys)
    warnings = span_warnings(full, resolved.options, keys) if warn else ()
    pairs = full.lazy().select(*keys.exact, pl.col(advantage_col), pl.col(RECOMPUTED))
    if is_list:
        pairs = pairs.explode(advantage_col, RECOMPUTED)
    stored = pl.col(advantage_col).cast(pl.Float64).fill_nan(None)
    new = pl.col(RECOMPUTED)
    diff = (
        pl.when(stored.is_null() & new.is_null())
        .then(pl.lit(0.0))
        .when(stored.is_null() | new.is_null())
        .then(pl.lit(float("inf")))
        .otherwise((stored - new).abs())
        .alias("abs_diff")
    )
    rows = collect(pairs.with_columns(diff))
    per_group = rows.group_by(list(keys.exact), maintain_order=True).agg(
        size=pl.len(), max_abs_diff=pl.col("abs_diff").max()
    )
    worst = (
        per_group.filter(pl.col("max_abs_diff") > tol)
        .sort("max_abs_diff", descending=True, maintain_order=True)
        .head(top)
    )
    worst = worst.rename({k: DISPLAY_NAMES[k] for k in keys.exact if k in DISPLAY_NAMES})
    max_diff = rows["abs_diff"].max()
    return VerifyReport(
        rows=rows.height,
        groups=per_group.height,
        max_abs_diff=float(max_diff) if max_diff is not None else 0.0,  # type: ignore[arg-type]
        rows_over=int((rows["abs_diff"] > tol).sum()),
        groups_over=int((per_group["max_abs_diff"] > tol).sum()),
        worst=worst,
        tol=tol,
        options=resolved.options,
        layout=resolved.layout,
        warnings=warnings,
    )

"""``compare``: one log's advantages under several methods side by side.

A *method* is a trainer preset (as ``compute --preset``) or an estimator (with the default
policies). Every method is computed deterministically on the same frame; method ``m``'s
column, ``advantage_<m>`` (``-`` written ``_``), equals what ``compute`` writes with it.

Figures, per method, over the rows where its advantage is not null (``A``):

* ``mean_abs = mean(|A|)``; ``std = sqrt(mean((A - mean(A))^2))`` (population, ddof 0);
  ``zero_share = #{A == 0} / n``; all null when the method leaves every advantage null.

Against the first method (``B``), over the rows where both are not null:

* ``max_abs_diff = max |A - B|``;
* ``correlation``: Pearson's ``cov(A, B) / (std(A) std(B))``; null when either method's
  advantages are constant there (a zero std: the correlation is undefined) or fewer than
  two rows are paired;
* ``sign_differs = #{sign(A) != sign(B)} / n``, with ``sign(0) = 0`` its own sign (so
  ``0`` against ``0.3`` differs, ``0`` against ``0`` does not).

The groups where methods disagree most: per row ``d = max over the other methods of
|A_m - A_first|`` (pairs with a null ignored), per group the largest ``d``; the ``top``
groups by it above 0, largest first (ties in order of appearance). Groups are the first
method's, their rewards those the estimator saw (the combined reward).

``explicit`` (what the user gave) is shared by every method and wins over every preset. A
trainer dump is read with one layout for every method (:func:`shared_layout`), so
``--preset trl --preset verl`` compare the two formulas on the same groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import polars as pl

from grpo_cli.core.columns import REWARD_KEY, readable
from grpo_cli.core.errors import Message, OptionsError, OutputError, Verbatim, option
from grpo_cli.core.estimators import get_estimator
from grpo_cli.core.layouts import detect_layout
from grpo_cli.core.presets import get_preset
from grpo_cli.core.resolve import Request, make_request
from grpo_cli.jobs.pipeline import Annotation, annotate_request
from grpo_cli.report.summarize import largest_per_group

COLUMN_PREFIX: Final = "advantage_"
DEFAULT_TOP: Final = 5


@dataclass(frozen=True)
class Method:
    """A preset or an estimator, by its canonical name."""

    name: str
    kind: Literal["preset", "estimator"]

    @property
    def column(self) -> str:
        """Its output column: ``advantage_<name>`` with ``-`` as ``_``."""
        return COLUMN_PREFIX + self.name.replace("-", "_")

    @property
    def label(self) -> str:
        """``preset trl`` or ``estimator rloo``."""
        return f"{self.kind} {self.name}"


def methods_from(presets: Sequence[str], estimators: Sequence[str]) -> tuple[Method, ...]:
    """The methods to compare: the presets, then the estimators, each in the order given,
    by canonical name (an unknown name is an OptionsError with a did-you-mean). Fewer
    than two methods, or two with the same output column, are an OptionsError."""
    methods = [Method(get_preset(p).name, "preset") for p in presets]
    methods += [Method(get_estimator(e).name, "estimator") for e in estimators]
    if len(methods) < 2:
        raise OptionsError(
            f"compare needs at least two methods, got {len(methods)}",
            hint="give two or more of "
            + option("preset", Verbatim("NAME"))
            + " and "
            + option("estimator", Verbatim("NAME"))
            + " (e.g. "
            + option("preset", Verbatim("trl"))
            + " "
            + option("preset", Verbatim("verl"))
            + ")",
        )
    seen: dict[str, Method] = {}
    for method in methods:
        if method.column in seen:
            raise OptionsError(
                f"{method.label} is given twice (both would be {method.column})",
                hint="name each method once",
            )
        seen[method.column] = method
    return tuple(methods)


@dataclass(frozen=True)
class MethodStats:
    """One method's figures (see the module docstring); the pairwise ones are None for the
    first method (``correlation`` also where undefined)."""

    method: Method
    responses: int
    mean_abs: float | None
    std: float | None
    zero_share: float | None
    max_abs_diff: float | None = None
    correlation: float | None = None
    sign_differs: float | None = None


@dataclass(frozen=True)
class GroupDisagreement:
    """A group where methods disagree: its key (readable column name, value), size,
    rewards in row order, the largest |difference| from the first method and its method."""

    key: tuple[tuple[str, Any], ...]
    size: int
    rewards: tuple[float | None, ...]
    max_abs_diff: float
    method: Method


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: ``frame`` holds every input row, in order, with one
    ``advantage_<method>`` column per method; ``written``: where :func:`run_compare` wrote it
    (``standard output``, ``compared.parquet (parquet)``), or None."""

    methods: tuple[Method, ...]
    frame: pl.DataFrame
    stats: tuple[MethodStats, ...]
    top_groups: tuple[GroupDisagreement, ...]
    warnings: tuple[Message, ...] = ()
    layout: str | None = None
    layout_preset: str | None = None
    written: str | None = None


def run_compare(
    inputs: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    presets: Sequence[str] = (),
    estimators: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
    top: int = DEFAULT_TOP,
    input_format: str | None = None,
    output_format: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Comparison:
    """Compare the log in ``inputs`` under the ``presets`` and ``estimators`` (what
    ``grpo-adv compare`` runs; every option and the output checked before any read).

    Args:
        inputs, input_format, force, warn: as for
            :func:`grpo_cli.report.summarize.run_summarize`.
        output: where :attr:`Comparison.frame` goes (``"-"``: standard output; format from
            the suffix, else ``output_format``, else the input's), or None.
        presets, estimators: the methods, presets first (two or more in all).
        options: compute's options (the CLI's keywords) shared by every method.
        top: groups listed where the methods disagree most.
    """
    from grpo_cli.io.formats import normalize_format
    from grpo_cli.io.write import check_output_path, write_table
    from grpo_cli.jobs.outputs import (
        input_paths,
        output_target,
        read_input,
        remove_leftovers,
        sources_or_stdin,
    )

    methods = methods_from(presets, estimators)
    explicit = dict(options or {})
    requests = method_requests(methods, explicit)  # every option checked before any read
    if output_format is not None:
        normalize_format(output_format)
    sources = sources_or_stdin([str(source) for source in inputs])
    protected = input_paths(sources)
    target = None if output is None else Path(output)
    to_stdout = target is not None and str(target) == "-"
    if target is not None and not to_stdout:
        if target.is_dir():
            raise OutputError(
                option("output", Verbatim(str(target)), short=True)
                + " is a folder; compare writes one table",
                hint="name a file in it, e.g. "
                + option("output", Verbatim(str(target / "compared.parquet")), short=True),
            )
        remove_leftovers([target], warn)  # whatever this run's fate
        check_output_path(target, force=force, protected=protected)
    log = read_input(protected, input_format, requests[methods[0]].key_cols)
    fmt = None
    if target is not None:
        _, fmt = output_target(sources, str(target), output_format, log.format)
    result = compare(log.frame, methods, explicit, top=top)
    result = replace(result, warnings=(*log.warnings, *result.warnings))
    if target is None:
        return result
    write_table(result.frame, target, force=force, protected=protected, fmt=fmt)
    return replace(result, written="standard output" if to_stdout else f"{target} ({fmt})")


def method_requests(
    methods: Sequence[Method], explicit: Mapping[str, Any]
) -> dict[Method, Request]:
    """Each method's request: the shared ``explicit`` options over its preset (or with its
    estimator), computed deterministically into :attr:`Method.column`."""
    fields = {**explicit, "deterministic": True}
    return {
        m: make_request(m.name, {**fields, "advantage_col": m.column})
        if m.kind == "preset"
        else make_request(None, {**fields, "advantage_col": m.column, "estimator": m.name})
        for m in methods
    }


def shared_layout(frame: pl.DataFrame, methods: Sequence[Method]) -> tuple[str, str] | None:
    """The dump layout every method reads ``frame`` with, and the preset it comes from: the
    first preset, in the order given, that has a layout and whose trainer's dump ``frame``
    is; None when there is none (each method then reads the log as ``compute`` does)."""
    for method in methods:
        if method.kind != "preset":
            continue
        layout = get_preset(method.name).layout
        if layout is not None and detect_layout(frame.columns, layout) is not None:
            return layout, method.name
    return None


def compare(
    frame: pl.DataFrame,
    methods: Sequence[Method],
    explicit: Mapping[str, Any],
    *,
    top: int = DEFAULT_TOP,
) -> Comparison:
    """Every method's advantages on ``frame`` with the shared ``explicit`` options, their
    figures and the ``top`` groups where they disagree most (see the module docstring)."""
    if top < 0:
        raise OptionsError(
            option("top") + f" must be 0 or more, got {top}",
            hint="e.g. " + option("top", 5),
            value=top,
        )
    layout, preset = shared_layout(frame, methods) or (None, None)
    requests = method_requests(methods, explicit)
    annotations = [annotate_request(frame, requests[m], layout=layout) for m in methods]
    out = frame.with_columns(a.frame[m.column] for a, m in zip(annotations, methods, strict=True))
    values = [_values(out[m.column]) for m in methods]
    warnings = tuple(dict.fromkeys(w for a in annotations for w in a.warnings))
    return Comparison(
        methods=tuple(methods),
        frame=out,
        stats=tuple(_stats(m, v, values[0]) for m, v in zip(methods, values, strict=True)),
        top_groups=_top_groups(annotations[0], methods, values, top),
        warnings=warnings,
        layout=layout,
        layout_preset=preset,
    )


def _values(column: pl.Series) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A column as float64, null as NaN."""
    return column.cast(pl.Float64).fill_null(float("nan")).to_numpy().astype(np.float64)


def _stats(
    method: Method,
    a: np.ndarray[Any, np.dtype[np.float64]],
    first: np.ndarray[Any, np.dtype[np.float64]],
) -> MethodStats:
    """``a``'s figures, and against ``first`` (the first method's) unless it is ``a``."""
    valid = a[~np.isnan(a)]
    if valid.size == 0:
        return MethodStats(method, 0, None, None, None)
    own = MethodStats(
        method,
        int(valid.size),
        mean_abs=float(np.mean(np.abs(valid))),
        std=float(np.std(valid)),
        zero_share=float(np.mean(valid == 0.0)),
    )
    both = ~np.isnan(a) & ~np.isnan(first)
    x, y = a[both], first[both]
    if a is first or x.size == 0:
        return own
    return replace(
        own,
        max_abs_diff=float(np.max(np.abs(x - y))),
        correlation=pearson(x, y),
        sign_differs=float(np.mean(np.sign(x) != np.sign(y))),
    )


def pearson(
    x: np.ndarray[Any, np.dtype[np.float64]], y: np.ndarray[Any, np.dtype[np.float64]]
) -> float | None:
    """Pearson's correlation of ``x`` and ``y``; None when fewer than two pairs or either
    is constant (a zero std: undefined)."""
    if x.size < 2:
        return None
    dx, dy = x - x.mean(), y - y.mean()
    sx, sy = math.sqrt(float(np.dot(dx, dx))), math.sqrt(float(np.dot(dy, dy)))
    if sx == 0.0 or sy == 0.0:
        return None
    return max(-1.0, min(1.0, float(np.dot(dx, dy)) / (sx * sy)))


def _top_groups(
    first: Annotation,
    methods: Sequence[Method],
    values: Sequence[np.ndarray[Any, np.dtype[np.float64]]],
    top: int,
) -> tuple[GroupDisagreement, ...]:
    if top == 0 or len(first.full) == 0:
        return ()
    diffs = np.stack([np.abs(v - values[0]) for v in values[1:]])  # NaN where a null
    paired = ~np.isnan(diffs)
    largest = np.where(paired, diffs, -1.0)
    which = np.argmax(largest, axis=0)  # the other method with the largest difference
    row_diff = np.max(largest, axis=0)  # -1: no paired difference on this row
    exact = list(first.plan.keys.exact)
    keys = {f"k{i}": first.full[c] for i, c in enumerate(exact)}
    rows = pl.DataFrame(
        {
            **keys,
            "reward": first.full[REWARD_KEY].cast(pl.Float64),
            "abs_diff": row_diff,
            "which": which.astype(np.int64),
        }
    )
    which_most = pl.col("which").get(pl.col("abs_diff").arg_max())
    _, groups = largest_per_group(
        rows, list(keys), pl.col("abs_diff") > 0, top, pl.col("reward"), which_most
    )
    return tuple(
        GroupDisagreement(
            key=tuple((readable(c), row[f"k{i}"]) for i, c in enumerate(exact)),
            size=int(row["size"]),
            rewards=tuple(row["reward"]),
            max_abs_diff=float(row["max_abs_diff"]),
            method=methods[1 + int(row["which"])],
        )
        for row in groups.iter_rows(named=True)
    )

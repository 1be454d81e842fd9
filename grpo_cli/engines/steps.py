"""The step pass of ``--low-memory``: a log written step by step, in one read and one write.

Real logs are written a step at a time, and groups form within steps (the step column is in
the group key). When the step column never decreases along the rows, every group of a step
is complete once the next step starts, so one streaming pass computes the log exactly:

- read the Parquet log in batches of BATCH_ROWS rows (Polars' streaming reader, every column);
- hold back the rows of the batch's last step (it may go on in the next batch) and annotate
  the complete steps before it with the Polars engine (the plan made once for the log), at
  least COMPUTE_ROWS rows at a time;
- write them, in input order, to the output Parquet file (a writer thread, so that encoding
  overlaps the next batch's compute).

The step order is checked on the data as it streams, never from footer statistics (which can
lie). The pass gives up (:class:`NotStepOrdered`), with nothing kept of what it wrote, when
a step is smaller than the one before it (the log is not step-ordered after all) or when one
step's rows pass MAX_STEP_BYTES (its memory would pass the budget); the caller then runs the
partitioned path from the start of the file. Memory: about one batch, one compute chunk and
the largest step (COMPUTE_ROWS rows of the benchmark's three columns: ~100 MB).

Eligible plans (:func:`why_not`): the step column is in the group key, and a formula that
reads batch statistics has the step as its batch (a batch spanning steps needs every step).
The checks of the partitioned path are made on each chunk: null keys, null, infinite or huge
rewards (counted over the whole log, then refused with the in-memory path's messages), groups
spanning a batch column, rows repeating a response id, and the run's figures as partials.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core import metrics, progress
from grpo_cli.core.columns import PART_ROW
from grpo_cli.core.errors import InputError
from grpo_cli.core.layouts import derived_column
from grpo_cli.core.plan import Plan
from grpo_cli.core.rewards import combined_reward
from grpo_cli.core.run_summary import RunSummary, piece_warnings, response_id
from grpo_cli.core.schema import refuse_values, value_checks
from grpo_cli.engines.batch_partials import needs_batch_stats
from grpo_cli.engines.narrow import (
    check_batch_spans,
    keep_merging,
    merge_repeats,
    piece_repeats,
    piece_run_partials,
    response_hash,
)
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.io.parquet_stream import ParquetStream
from grpo_cli.io.read import scan_file

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS: Final = 500_000  # rows a read batch holds
COMPUTE_ROWS: Final = 1_000_000  # complete steps gathered before one compute (at least)
MAX_STEP_BYTES: Final = 512 * 2**20  # one step's rows held at most (Polars' estimate)
ROW: Final = PART_ROW


class NotStepOrdered(Exception):
    """The step pass gave up: ``reason`` says why, for the run summary."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def why_not(plan: Plan) -> str | None:
    """Why the step pass cannot compute ``plan`` (None: it can)."""
    step = plan.step_col
    if step is None:
        return "the log has no step column"
    if step not in plan.keys.exact or plan.options.group_size is not None:
        return f"groups are not formed within each {step}"
    if needs_batch_stats(plan) and plan.keys.batch != (step,):
        return f"the formula's batch spans several values of {step}"
    return None


@dataclass
class _Totals:
    """What the pass keeps between chunks: the value counts, the run partials, the repeats."""

    counts: dict[str, int]
    parts: list[pl.DataFrame]
    repeats: list[tuple[int, int] | None]
    refused: InputError | None = None


def run_steps(
    source: Path,
    output: Path,
    plan: Plan,
    *,
    batch_rows: int = BATCH_ROWS,
    compute_rows: int = COMPUTE_ROWS,
    max_step_bytes: int | None = None,
) -> RunSummary:
    """Annotate the step-ordered Parquet log ``source`` into ``output`` in one pass (see the
    module docstring), its rows reported to :mod:`grpo_cli.core.progress`. Raises
    :class:`NotStepOrdered` (``output`` removed) when the log turns out not to be, and the
    input errors of the in-memory path."""
    step = plan.step_col
    assert step is not None and why_not(plan) is None
    options = plan.options
    response = response_id(scan_file(source).collect_schema(), options)
    totals = _Totals({}, [], [])
    rows = scan_file(source).select(pl.len()).collect().item()
    writer = ParquetStream(output, plain=[options.advantage_col])
    try:
        limit = MAX_STEP_BYTES if max_step_bytes is None else max_step_bytes
        chunks = _complete_steps(source, rows, step, batch_rows, compute_rows, limit)
        for index, chunk in enumerate(chunks):
            if index == 0:  # not before: a log out of step order may show in its first batch
                progress.stage("computing in one pass", rows)
            table = _compute(chunk, plan, response, totals)
            if table is not None:
                writer.put(table)
            progress.advance(chunk.height)
        writer.close()
        refuse_values(totals.counts, options, plan.estimator.uses_groups)
        if totals.refused is not None:
            raise totals.refused
        if not totals.parts:
            raise NotStepOrdered("the log has no rows")
    except BaseException:
        writer.abandon()
        output.unlink(missing_ok=True)
        raise
    merged = metrics.merge(totals.parts)
    key = [*plan.keys.exact, *([response] if response else [])]

    def row(index: int) -> dict[str, Any]:
        found = scan_file(source).slice(index, 1)
        found = found.with_columns(derived_column(name) for name in plan.derived)
        return found.select(key).collect().row(0, named=True)

    repeats = merge_repeats(totals.repeats)
    notices = piece_warnings(plan, merged, None, repeats, response, row)
    return replace(RunSummary.from_partials(merged), notices=notices)


def _complete_steps(
    source: Path, rows: int, step: str, batch_rows: int, compute_rows: int, max_step_bytes: int
) -> Iterator[pl.DataFrame]:
    """The ``rows`` rows of ``source`` in chunks of whole steps (at least ``compute_rows``
    rows, the last one excepted), each with its row index (ROW); raises
    :class:`NotStepOrdered`. Each batch is a slice of the scan collected on its own: only
    the row groups it covers are read, with no read-ahead (Polars' streaming batches held
    twice the memory of the whole pass)."""
    held: list[pl.DataFrame] = []  # complete steps not yet given
    held_rows = 0
    tail: pl.DataFrame | None = None  # the last step seen, maybe not complete
    last: Any = None
    scan = scan_file(source)
    for start in range(0, rows, batch_rows):
        batch = scan.slice(start, batch_rows).collect().with_row_index(ROW, offset=start)
        if not batch.height:
            continue
        steps = batch.get_column(step)
        first = steps[0]
        if steps.null_count():
            raise NotStepOrdered(f"{step} has null values")
        if last is not None and first < last:
            raise NotStepOrdered(_backwards(step, first, last, int(batch.get_column(ROW)[0])))
        if not steps.is_sorted():
            at = int((steps.slice(1) < steps.slice(0, len(steps) - 1)).arg_true()[0]) + 1
            row = int(batch.get_column(ROW)[at])
            raise NotStepOrdered(_backwards(step, steps[at], steps[at - 1], row))
        last = steps[-1]
        cut = int(steps.search_sorted(last, side="left"))
        if cut == 0:  # the whole batch goes on the tail's step
            tail = batch if tail is None else pl.concat([tail, batch], rechunk=False)
        else:
            if tail is not None:
                held.append(tail)
                held_rows += tail.height
            held.append(batch.slice(0, cut))
            held_rows += cut
            tail = batch.slice(cut)
        if tail.estimated_size() > max_step_bytes:
            raise NotStepOrdered(
                f"{step} {last} alone holds more than the {max_step_bytes / 2**20:g} MiB a "
                "step may hold in the one-pass route"
            )
        if held_rows >= compute_rows:
            yield pl.concat(held, rechunk=False)
            held, held_rows = [], 0
    if tail is not None:
        held.append(tail)
    if held:
        yield pl.concat(held, rechunk=False)


def _backwards(step: str, value: Any, before: Any, row: int) -> str:
    return f"{step} {value} follows {step} {before} at row {row:,}: the log is not step-ordered"


def _compute(
    chunk: pl.DataFrame, plan: Plan, response: str | None, totals: _Totals
) -> pa.Table | None:
    """Check and annotate one chunk of whole steps; its output table (input columns, then
    the added ones), or None once a value is to be refused (the rest are only counted)."""
    options = plan.options
    uses_groups = plan.estimator.uses_groups
    columns = [c for c in chunk.columns if c != ROW]
    if plan.derived:  # a dump layout's key (verl's uid group), never written
        chunk = chunk.with_columns(derived_column(name) for name in plan.derived)
    checks = value_checks(options, uses_groups, chunk.schema)
    nulls = combined_reward(options).is_null().any()
    found = chunk.select(**checks, __nulls=nulls).row(0, named=True)
    for name in checks:
        totals.counts[name] = totals.counts.get(name, 0) + int(found[name] or 0)
    if any(totals.counts.values()) or totals.refused is not None:
        return None
    group = plan.keys.exact
    # Without a null reward in the chunk, the one grouping pass needs no row count of its own.
    full = POLARS.annotate(chunk, replace(plan, has_nulls=bool(found["__nulls"])))
    try:
        check_batch_spans(full, options, group, uses_groups=uses_groups)
    except InputError as exc:
        totals.refused = exc
        return None
    keep_merging(totals.parts, piece_run_partials(full, options, group), metrics.merge)
    if response is not None:
        hashed = full.select(*group, ROW, response_hash(response))
        totals.repeats.append(piece_repeats(hashed, group, ROW))
    return full.select(*columns, *options.added_columns()).to_arrow()

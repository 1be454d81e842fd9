"""The partitioned engine (``--backend partitioned``, alias ``--low-memory``): logs larger
than memory, Parquet in, Parquet out, in bounded memory, exact.

Three streaming passes over a Parquet log, spilling to a temporary folder beside the output:

1. **Partition.** Stream the columns the computation needs, with each row's index, into
   ``partitions`` files by a hash of the group key: every group lands whole in one file.
   The key is spilled as two independent 64-bit hashes (fixed-width, far cheaper to move
   than strings): the first identifies the group, the second detects a collision of the
   first.
2. **Compute.** Each partition (about rows / partitions rows) is annotated in memory by the
   Polars engine with the plan made once for the whole log (no check runs again), so every
   group statistic and policy is the same; the advantages are spilled with their row index
   (rows keep their input order within a partition), and the run's figures are kept as
   partial aggregates (:mod:`grpo_cli.metrics`), merged on the way.
3. **Merge.** For each chunk of ``chunk_rows`` row indices, take the advantages of those rows
   from a cursor on each partition (each partition file is read once, front to back) and
   write them in input order; then a streaming horizontal concatenation of the input and
   those columns writes the output (about the cost of copying the input).

Peak memory is about one partition or one chunk, whichever is larger, whatever the log's
size. Every group lies whole in one partition, so the engine computes exactly the estimators
whose statistics stay within a group (``scope="group"`` in the estimator registry) and
refuses the rest. If two keys share the first hash (about a 1e-6 chance in a 12M-group
log), the run starts again with the exact key columns spilled instead of the hashes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli import metrics
from grpo_cli.columns import PART_CHECK, PART_GROUP, PART_INDEX, PART_ROW
from grpo_cli.engines import ENGINES, EngineInfo, FileJob, check
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.errors import GrpoAdvError, InputError
from grpo_cli.estimators import ESTIMATORS
from grpo_cli.options import AdvantageOptions
from grpo_cli.plan import Plan, decide, make_plan, resolve_keys
from grpo_cli.summary import RunSummary

if TYPE_CHECKING:
    import pyarrow as pa

ROW: Final = PART_ROW
PART: Final = PART_INDEX
GROUP: Final = PART_GROUP
CHECK: Final = PART_CHECK
PARTITIONS: Final = 256
CHUNK_ROWS: Final = 1_000_000
SPILL_BATCH: Final = 16_384
MERGE_EVERY: Final = 64  # partitions whose partials are kept before merging them


@dataclass(frozen=True)
class PartitionedEngine:
    """``--backend partitioned``: group-level estimators on one Parquet file."""

    info: EngineInfo

    def refusal(self, plan: Plan) -> str | None:
        """Whole-batch statistics, process supervision, positional groups and dropped
        singletons (it keeps every row, in order)."""
        options, estimator = plan.options, plan.estimator
        if estimator.scope == "batch" or options.aggregation == "normalize_then_sum":
            grouped = ", ".join(
                name
                for name, e in ESTIMATORS.items()
                if e.scope == "group" and e.unit == "response"
            )
            what = (
                f"estimator {estimator.name}"
                if estimator.scope == "batch"
                else "--aggregation normalize_then_sum"
            )
            return f"{what}: it needs whole-batch statistics (it computes {grouped})"
        if estimator.unit == "step":
            return "process supervision"
        if options.group_size is not None:
            return "--group-size (positional groups need the rows in order)"
        if options.singleton == "drop":
            return "--singleton drop (it keeps every row)"
        return None

    def require(self) -> None:
        """Nothing optional: Polars and pyarrow."""

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Annotate the Parquet log ``job.sources[0]`` into the Parquet file
        ``job.output``."""
        (source,) = job.sources
        return run(source, job.output, job.plan)


ENGINE = PartitionedEngine(ENGINES["partitioned"])


def annotate_to_parquet(
    source: Path,
    output: Path,
    options: AdvantageOptions,
    *,
    partitions: int = PARTITIONS,
    chunk_rows: int = CHUNK_ROWS,
    on_step: Callable[[str], None] | None = None,
) -> RunSummary:
    """Annotate the Parquet log ``source`` into the Parquet file ``output`` in bounded
    memory (see the module docstring) and return the run's figures: the Python API of the
    engine (checks the log and makes the plan first)."""
    check(ENGINE, decide(options, hashed=False))
    plan = make_plan(pl.scan_parquet(source), options, hashed=False)
    return run(source, output, plan, partitions=partitions, chunk_rows=chunk_rows, on_step=on_step)


class _Collision(Exception):
    """Two group keys share the spilled 64-bit hash."""


def run(
    source: Path,
    output: Path,
    plan: Plan,
    *,
    partitions: int = PARTITIONS,
    chunk_rows: int = CHUNK_ROWS,
    on_step: Callable[[str], None] | None = None,
) -> RunSummary:
    """The three passes (see the module docstring) for a checked ``plan``; on a hash
    collision, once more with the exact key spilled."""
    try:
        return _run(source, output, plan, partitions, chunk_rows, on_step, exact=False)
    except _Collision:
        return _run(source, output, plan, partitions, chunk_rows, on_step, exact=True)


def _run(
    source: Path,
    output: Path,
    plan: Plan,
    partitions: int,
    chunk_rows: int,
    on_step: Callable[[str], None] | None,
    *,
    exact: bool,
) -> RunSummary:
    from grpo_cli.io import make_spill_folder, spill_parent

    options = plan.options
    step = on_step or (lambda _: None)
    needed = _needed_columns(options, pl.scan_parquet(source).collect_schema())
    key_cols = plan.keys.exact
    spill = make_spill_folder(spill_parent(output))
    try:
        step("partitioning")
        _partition(source, spill / "in", needed, key_cols, partitions, chunk_rows, exact=exact)
        step("computing")
        group = key_cols if exact else (GROUP,)
        parts = _compute_partitions(spill, plan, group, check_hash=not exact)
        step("merging")
        _merge(source, spill, output, options.added_columns(), chunk_rows)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return _summary(parts)


def _spill_options() -> Any:
    """Arrow IPC write options of the spill files: lz4 (a quarter smaller, twice the cost
    of no compression, still ten times faster than Parquet on small batches)."""
    from pyarrow import ipc

    return ipc.IpcWriteOptions(compression="lz4")


def _needed_columns(options: AdvantageOptions, schema: pl.Schema) -> list[str]:
    names = [*options.reward_cols]
    for extra in (options.batch_col, options.length_col, options.baseline_col):
        if extra is not None:
            names.append(extra)
    return [name for name in dict.fromkeys(names) if name in schema]


def _partition(
    source: Path,
    folder: Path,
    needed: list[str],
    key_cols: tuple[str, ...],
    partitions: int,
    batch: int,
    *,
    exact: bool,
) -> None:
    """Stream ``source`` in batches into one spill file per partition (one Arrow IPC writer
    each, a record batch per input batch: memory stays at about one batch). The key goes as
    its two hashes, or ``exact``: as its columns."""
    import pyarrow.parquet as pq
    from pyarrow import ipc

    folder.mkdir()
    writers: dict[int, ipc.RecordBatchFileWriter] = {}
    offset = 0
    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    columns = list(dict.fromkeys([*needed, *key_cols]))
    spilled = list(dict.fromkeys([*key_cols, *needed])) if exact else [GROUP, CHECK, *needed]
    # pre_buffer=False: with read-ahead, pyarrow keeps about 7 MB per row group read until
    # the file is closed (1.6 GiB over a 200-row-group log); without it, memory stays flat.
    reader = pq.ParquetFile(source, pre_buffer=False)
    try:
        for record_batch in reader.iter_batches(batch_size=batch, columns=columns):
            frame = pl.DataFrame(pl.from_arrow(record_batch))
            frame = frame.with_row_index(ROW, offset=offset).with_columns(
                key.hash(seed=0).alias(GROUP), key.hash(seed=1).alias(CHECK)
            )
            frame = frame.with_columns((pl.col(GROUP) % partitions).alias(PART)).select(
                ROW, PART, *spilled
            )
            offset += frame.height
            # Sorted by partition, each partition's rows are one zero-copy slice.
            frame = frame.sort(PART, maintain_order=True)
            counts = frame.group_by(PART).agg(n=pl.len()).sort(PART)
            table = frame.drop(PART).to_arrow()
            start = 0
            for part, n in counts.iter_rows():
                index = int(part)
                if index not in writers:
                    path = folder / f"{index:05d}.arrow"
                    writers[index] = ipc.new_file(path, table.schema, options=_spill_options())
                writers[index].write_table(table.slice(start, n))
                start += n
    finally:
        for writer in writers.values():
            writer.close()


def _compute_partitions(
    spill: Path, plan: Plan, group: tuple[str, ...], *, check_hash: bool
) -> list[pl.DataFrame]:
    """Annotate every partition with the Polars engine on the plan made for the whole log,
    its group key the spilled one (``group``); spill the advantages, keep the partials."""
    from pyarrow import ipc

    options = plan.options
    parts: list[pl.DataFrame] = []
    out = spill / "adv"
    out.mkdir()
    inner_options = options.with_overrides(group_cols=group, backend="polars")
    inner = Plan(inner_options, plan.estimator, resolve_keys(inner_options), has_nulls=True)
    for path in sorted((spill / "in").glob("*.arrow")):
        full = POLARS.annotate(pl.read_ipc(path), inner)
        if check_hash and _collided(full):
            raise _Collision()
        _check_batch_spans(full, options, group)
        table = full.select(ROW, *options.added_columns()).to_arrow()
        with ipc.new_file(out / path.name, table.schema, options=_spill_options()) as writer:
            writer.write_table(table, max_chunksize=SPILL_BATCH)
        _accumulate(parts, full, options, group)
    return parts


def _collided(part: pl.DataFrame) -> bool:
    """Whether two keys of ``part`` share the spilled group hash (their check hashes then
    differ within the group)."""
    return bool(part.select((pl.col(CHECK) != pl.col(CHECK).max().over(GROUP)).any()).item())


def _check_batch_spans(
    part: pl.DataFrame, options: AdvantageOptions, group: tuple[str, ...]
) -> None:
    """Refuse groups whose rows fall in several values of the batch column, as the in-memory
    path does (:func:`grpo_cli.summary.check_batch_spans`); each group lies whole in one
    partition, so the check runs per partition."""
    column = options.batch_col
    if column is None or column in options.group_cols:
        return
    from grpo_cli.estimators import get_estimator

    if not get_estimator(options.estimator).uses_groups:
        return  # no groups to span batches, as in the in-memory check
    spanning = (
        part.group_by(list(group)).agg(pl.col(column).n_unique().alias("n")).filter(pl.col("n") > 1)
    )
    if spanning.height:
        key = ", ".join(options.group_cols)
        fix = " ".join(f"-g {c}" for c in (column, *options.group_cols))
        raise InputError(
            f"groups (by {key}) span several values of {column} (batch column): "
            f"at least {spanning.height} do",
            hint=f"group within each batch: {fix}",
        )


def _accumulate(
    parts: list[pl.DataFrame], full: pl.DataFrame, options: AdvantageOptions, group: tuple[str, ...]
) -> None:
    """Add the partials of the partition ``full`` to ``parts``, merged on the way every
    MERGE_EVERY partitions (every group lies whole in one partition; see
    :mod:`grpo_cli.metrics`). Unreduced partials (``reduce=False``: one query per
    partition) on the in-memory engine: a partition is small."""
    rows = metrics.with_profile(full.lazy(), group, options.ddof)
    parts.append(
        metrics.partials(
            rows,
            ddof=options.ddof,
            advantage=pl.col(options.advantage_col),
            batch=(options.batch_col,) if options.batch_col is not None else (),
            reduce=False,
        )
    )
    if len(parts) >= MERGE_EVERY:
        parts[:] = [metrics.merge(parts)]


def _merge(
    source: Path, spill: Path, output: Path, columns: tuple[str, ...], chunk_rows: int
) -> None:
    """The input with its advantages, in input order, to one Parquet file.

    Each partition's advantages are in input-row order, so every partition file is read once,
    front to back, through a cursor: chunk [lo, hi) of the row index takes from each cursor
    the rows below ``hi``, and the added columns are written in input order. A streaming
    horizontal concatenation of the input and that file then writes the output."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(source).metadata.num_rows
    cursors = [_Cursor(path) for path in sorted((spill / "adv").glob("*.arrow"))]
    ordered = spill / "ordered.parquet"
    writer: pq.ParquetWriter | None = None
    lo = 0
    try:
        for hi in range(min(chunk_rows, rows), rows + chunk_rows, chunk_rows):
            hi = min(hi, rows)
            pieces = [piece for cursor in cursors if (piece := cursor.take_below(hi)).num_rows]
            merged = pa.concat_tables(pieces)
            # The row indices are a permutation of [lo, hi): invert it instead of sorting.
            index = merged.column(0).to_numpy()
            position = np.empty(len(index), dtype=np.int64)
            position[index - lo] = np.arange(len(index))
            table = merged.select(list(columns)).take(position)
            lo = hi
            if writer is None:
                writer = pq.ParquetWriter(ordered, table.schema, compression="none")
            writer.write_table(table)
            if hi == rows:
                break
    finally:
        if writer is not None:
            writer.close()
    if writer is None or pq.ParquetFile(ordered).metadata.num_rows != rows:
        raise GrpoAdvError(
            "internal error: the spilled advantages do not cover the input rows",
            hint="run again without --low-memory, and report this",
        )
    from grpo_cli.io import PARQUET_ZSTD_LEVEL

    both = pl.concat([pl.scan_parquet(source), pl.scan_parquet(ordered)], how="horizontal")
    both.sink_parquet(output, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)


class _Cursor:
    """Reads one spilled partition (row index ascending) front to back, a batch at a time."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa
        from pyarrow import ipc

        self._reader = ipc.open_file(pa.OSFile(str(path)))
        self._next = 0
        self._pending: list[pa.RecordBatch] = []
        self._last = -1  # the largest row index read so far

    def take_below(self, hi: int) -> pa.Table:
        """The next rows whose index is below ``hi``."""
        import numpy as np
        import pyarrow as pa

        while self._last < hi and self._next < self._reader.num_record_batches:
            batch = self._reader.get_batch(self._next)
            self._next += 1
            if batch.num_rows:
                self._pending.append(batch)
                self._last = int(batch.column(0)[-1].as_py())
        table = pa.Table.from_batches(self._pending, schema=self._reader.schema)
        rows = table.column(0).to_numpy()
        cut = int(np.searchsorted(rows, hi))
        self._pending = table.slice(cut).to_batches()
        return table.slice(0, cut)


def _summary(parts: list[pl.DataFrame]) -> RunSummary:
    if not parts:
        raise GrpoAdvError(
            "internal error: no partition was computed",
            hint="run again without --low-memory, and report this",
        )
    return RunSummary.from_partials(metrics.merge(parts))

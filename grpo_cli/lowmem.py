"""``--low-memory``: logs larger than memory, in bounded memory, exact.

Three streaming passes over a Parquet log, spilling to a temporary folder:

1. **Partition.** Stream the columns the computation needs, with each row's index, into
   ``partitions`` files by a hash of the group key: every group lands whole in one file.
2. **Compute.** Each partition (about rows / partitions rows) is annotated in memory with the
   ordinary path (:func:`grpo_cli.compute.annotate_frame`), so every group statistic and
   policy is the same; the advantages are spilled with their row index (rows keep their
   input order within a partition).
3. **Merge.** For each chunk of ``chunk_rows`` row indices, take the advantages of those rows
   from a cursor on each partition (each partition file is read once, front to back) and
   write them in input order; then a streaming horizontal concatenation of the input and
   those columns writes the output (about the cost of copying the input).

Peak memory is about one partition or one chunk, whichever is larger, whatever the log's
size. Batch-level statistics (batch_std, gpg, the whitening estimators, GDPO) need the whole
batch at once and are refused here.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.compute import (
    CONSTANT_KEY,
    REWARD_KEY,
    SIZE_KEY,
    VALID_KEY,
    annotate_frame,
    resolve_keys,
)
from grpo_cli.errors import GrpoAdvError, InputError, OptionsError
from grpo_cli.estimators import get_estimator
from grpo_cli.options import AdvantageOptions
from grpo_cli.summary import RunSummary

if TYPE_CHECKING:
    import pyarrow as pa

ROW: Final = "__grpo_lowmem_row"
PART: Final = "__grpo_lowmem_part"
GROUP: Final = "__grpo_lowmem_group"
CHECK: Final = "__grpo_lowmem_check"
SPILL_BATCH: Final = 16_384
BATCH_LEVEL: Final = frozenset({"batch_std", "gpg", "reinforce_pp", "reinforce_pp_baseline"})


@dataclass
class _Totals:
    """Figures summed over partitions (each group lies in one partition)."""

    rows: int = 0
    groups: int = 0
    zero_std_groups: int = 0
    zero_std_rows: int = 0
    singleton_groups: int = 0
    null_rewards: int = 0
    size_min: float | None = None
    size_max: float | None = None
    adv_min: float | None = None
    adv_max: float | None = None
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)
    batches: set[object] = field(default_factory=set)

    def add_rewards(self, n: int, mean: float, m2: float) -> None:
        """Chan et al.'s parallel update of count, mean and sum of squared deviations."""
        if n == 0:
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total


def _spill_options() -> Any:
    """Arrow IPC write options of the spill files: lz4 (a quarter smaller, twice the cost
    of no compression, still ten times faster than Parquet on small batches)."""
    from pyarrow import ipc

    return ipc.IpcWriteOptions(compression="lz4")


def check_low_memory(options: AdvantageOptions) -> None:
    """Refuse what the partitioned path cannot compute exactly."""
    estimator = get_estimator(options.estimator)
    if estimator.name in BATCH_LEVEL or options.aggregation != "sum_then_normalize":
        raise OptionsError(
            f"--low-memory computes group-level estimators; {estimator.name} with "
            f"--aggregation {options.aggregation} needs whole-batch statistics",
            hint="drop --low-memory, or use grpo, dr_grpo, rloo, opo, grpo_passk or remax",
        )
    if estimator.name == "process" or options.group_size is not None:
        raise OptionsError(
            "--low-memory does not support process supervision or --group-size",
            hint="drop --low-memory",
        )
    if options.singleton == "drop" or options.backend != "polars":
        raise OptionsError(
            "--low-memory keeps every row on the Polars backend (no --singleton drop, "
            "no --backend torch)",
            hint="drop --low-memory",
        )


def annotate_to_parquet(
    source: Path,
    output: Path,
    options: AdvantageOptions,
    *,
    partitions: int = 256,
    chunk_rows: int = 1_000_000,
    on_step: Callable[[str], None] | None = None,
) -> RunSummary:
    """Annotate the Parquet log ``source`` into the Parquet file ``output`` in bounded
    memory (see module docstring) and return the run's figures."""
    check_low_memory(options)
    step = on_step or (lambda _: None)
    scan = pl.scan_parquet(source)
    schema = scan.collect_schema()  # also checks that the file is Parquet
    from grpo_cli.compute import validate_frame

    validate_frame(scan, options)
    needed = _needed_columns(options, schema)
    keys = resolve_keys(options)
    from grpo_cli.io import make_spill_folder, spill_parent

    spill = make_spill_folder(spill_parent(output))
    try:
        step("partitioning")
        _partition(source, spill / "in", needed, keys.exact, partitions, chunk_rows)
        step("computing")
        totals = _compute_partitions(spill, options)
        step("merging")
        _merge(source, spill, output, options.added_columns(), chunk_rows)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return _summary(totals, options)


def _partition(
    source: Path,
    folder: Path,
    needed: list[str],
    key_cols: tuple[str, ...],
    partitions: int,
    batch: int,
) -> None:
    """Stream ``source`` in batches into one spill file per partition (one Arrow IPC writer
    each, a record batch per input batch: memory stays at about one batch; IPC writes small
    batches ten times faster than Parquet). The group key is spilled as two independent
    64-bit hashes (fixed-width, far cheaper to move than strings): the first identifies the
    group, the second detects a collision of the first."""
    import pyarrow.parquet as pq
    from pyarrow import ipc

    folder.mkdir()
    writers: dict[int, ipc.RecordBatchFileWriter] = {}
    offset = 0
    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    columns = list(dict.fromkeys([*needed, *key_cols]))
    # pre_buffer=False: with read-ahead, pyarrow keeps about 7 MB per row group read until
    # the file is closed (1.6 GiB over a 200-row-group log); without it, memory stays flat.
    reader = pq.ParquetFile(source, pre_buffer=False)
    try:
        for record_batch in reader.iter_batches(batch_size=batch, columns=columns):
            frame = pl.DataFrame(pl.from_arrow(record_batch))
            frame = frame.with_row_index(ROW, offset=offset).with_columns(
                key.hash(seed=0).alias(GROUP), key.hash(seed=1).alias(CHECK)
            )
            frame = frame.select(ROW, GROUP, CHECK, *needed).with_columns(
                (pl.col(GROUP) % partitions).alias(PART)
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


def _needed_columns(options: AdvantageOptions, schema: pl.Schema) -> list[str]:
    names = [*options.reward_cols]
    for extra in (options.batch_col, options.length_col, options.baseline_col):
        if extra is not None:
            names.append(extra)
    return [name for name in dict.fromkeys(names) if name in schema]


def _compute_partitions(spill: Path, options: AdvantageOptions) -> _Totals:
    from pyarrow import ipc

    totals = _Totals()
    out = spill / "adv"
    out.mkdir()
    inner = options.with_overrides(group_cols=(GROUP,))
    for path in sorted((spill / "in").glob("*.arrow")):
        part = pl.read_ipc(path)
        full, _ = annotate_frame(part, inner)
        if full.select((pl.col(CHECK) != pl.col(CHECK).max().over(GROUP)).any()).item():
            raise GrpoAdvError(
                "two group keys share a 64-bit hash (about a 1e-6 chance in a 12M-group log)",
                hint="run again without --low-memory",
            )
        _check_batch_spans(full, options)
        table = full.select(ROW, *options.added_columns()).to_arrow()
        with ipc.new_file(out / path.name, table.schema, options=_spill_options()) as writer:
            writer.write_table(table, max_chunksize=SPILL_BATCH)
        _accumulate(totals, full, options)
    totals.groups = sum(totals.hist.values())
    return totals


def _check_batch_spans(part: pl.DataFrame, options: AdvantageOptions) -> None:
    """Refuse groups whose rows fall in several values of the batch column, as the in-memory
    path does (:func:`grpo_cli.summary.check_batch_spans`); each group lies whole in one
    partition, so the check runs per partition, on the key hash."""
    column = options.batch_col
    if column is None or column in options.group_cols:
        return
    spanning = (
        part.group_by(GROUP).agg(pl.col(column).n_unique().alias("n")).filter(pl.col("n") > 1)
    )
    if spanning.height:
        key = ", ".join(options.group_cols)
        fix = " ".join(f"-g {c}" for c in (column, *options.group_cols))
        raise InputError(
            f"groups (by {key}) span several values of {column} (batch column): "
            f"at least {spanning.height} do",
            hint=f"group within each batch: {fix}",
        )


def _accumulate(totals: _Totals, full: pl.DataFrame, options: AdvantageOptions) -> None:
    r = pl.col(REWARD_KEY)
    adv = pl.col(options.advantage_col)
    size = pl.col(SIZE_KEY)
    f = full.select(
        rows=pl.len(),
        zero_std_rows=pl.col(CONSTANT_KEY).sum(),
        zero_std_groups=(1.0 / size).filter(pl.col(CONSTANT_KEY)).sum(),
        singleton_groups=(1.0 / size).filter(pl.col(VALID_KEY) == 1).sum(),
        nulls=r.is_null().sum(),
        size_min=size.min(),
        size_max=size.max(),
        adv_min=adv.min(),
        adv_max=adv.max(),
        n=r.count(),
        mean=r.mean(),
        m2=((r - r.mean()) ** 2).sum(),
    ).row(0, named=True)
    totals.rows += int(f["rows"])
    totals.zero_std_rows += int(f["zero_std_rows"])
    totals.zero_std_groups += round(f["zero_std_groups"] or 0)
    totals.singleton_groups += round(f["singleton_groups"] or 0)
    totals.null_rewards += int(f["nulls"])
    totals.size_min = _pick(min, totals.size_min, f["size_min"])
    totals.size_max = _pick(max, totals.size_max, f["size_max"])
    totals.adv_min = _pick(min, totals.adv_min, f["adv_min"])
    totals.adv_max = _pick(max, totals.adv_max, f["adv_max"])
    totals.add_rewards(int(f["n"]), f["mean"] or 0.0, f["m2"] or 0.0)
    for s, n in full.group_by(SIZE_KEY).agg(n=pl.len()).iter_rows():
        totals.hist[int(s)] = totals.hist.get(int(s), 0) + int(n) // int(s)
    if options.batch_col is not None:
        totals.batches.update(full[options.batch_col].unique().to_list())


def _pick(fn: Callable[[float, float], float], a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


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


def _summary(totals: _Totals, options: AdvantageOptions) -> RunSummary:
    from grpo_cli.summary import _weighted_median

    sizes = sorted(totals.hist)
    median = _weighted_median(sizes, [totals.hist[s] for s in sizes])
    std = math.sqrt(totals.m2 / (totals.n - 1)) if totals.n > 1 else None
    return RunSummary(
        rows=totals.rows,
        groups=totals.groups,
        batches=len(totals.batches) if options.batch_col else 1,
        group_size_min=int(totals.size_min or 0),
        group_size_median=median,
        group_size_max=int(totals.size_max or 0),
        zero_std_groups=totals.zero_std_groups,
        zero_std_group_share=totals.zero_std_groups / totals.groups if totals.groups else 0.0,
        frac_reward_zero_std=totals.zero_std_rows / totals.rows if totals.rows else 0.0,
        singleton_groups=totals.singleton_groups,
        null_rewards=totals.null_rewards,
        reward_mean=totals.mean if totals.n else None,
        reward_std=std,
        advantage_min=totals.adv_min,
        advantage_max=totals.adv_max,
    )

"""The partitioned engine (``--backend partitioned``, alias ``--low-memory``): logs larger
than memory, Parquet in, Parquet out, in bounded memory, exact.

Three streaming passes over a Parquet log, spilling to a temporary folder beside the output:

1. **Partition.** Stream the columns the computation needs, with each row's index, into
   ``partitions`` files by a hash of the group key (Polars' streaming engine, partitioned
   sink): every group lands whole in one file. The key is spilled as two independent
   64-bit hashes (fixed-width, far cheaper to move than strings): the first identifies the
   group, the second detects a collision of the first (in the same grouping pass as the
   group statistics: ``Keys.check``).
2. **Compute.** Each partition (about PARTITION_ROWS rows) is annotated in memory by the
   Polars engine with the plan made once for the whole log (no check runs again), so every
   group statistic and policy is the same; the advantages are spilled with their row index
   into one file per range of ``chunk_rows`` row indices (each partition adds its rows of
   every range, in input order), and the run's figures are kept as partial aggregates
   (:mod:`grpo_cli.core.metrics`), merged on the way.
3. **Merge.** Each range's file holds every row of the range once: its advantages are put
   in input order by inverting their row index (no sort, no merge of sorted runs), a file
   per range; then a streaming horizontal concatenation of the input and those files
   writes the output (about the cost of copying the input).

Spill files are uncompressed Arrow IPC, each removed once read (the disk holds at most
about 30 bytes a row).

Checks. The plan is made on the file's schema only (:func:`grpo_cli.core.resolve.resolve`):
null keys and null, infinite or huge rewards are counted on the data itself, in each
partition as it is computed (a null key is spilled as a null second hash), and refused
after the compute pass with the in-memory path's messages and counts; never from the
Parquet footer's statistics, which a writer can get wrong. A file that cannot be read (a
damaged page, a cut file) is an input error naming it, with the reader's cause.

Interrupts. From the command line (:meth:`PartitionedEngine.annotate_files`), the passes
run in a worker process (:func:`run_isolated`): Polars' long calls run in Rust threads
that a signal cannot stop, so on Ctrl-C or SIGTERM the command kills the worker, which
then writes nothing more, removes the spill folder and its temporary output, and exits
(130 or 143) within a fraction of a second. The worker dies with the command
(``PR_SET_PDEATHSIG``), so a ``kill -9`` of the command leaves no process behind, only
tagged temporaries for the next run to remove.
Peak memory is about one partition or one chunk, whichever is larger, whatever the log's
size. Every group lies whole in one partition, so every group statistic is exact there.
A formula that reads batch statistics (``scope="batch"`` estimators, GDPO) gets them from
mergeable partials (:mod:`grpo_cli.engines.batch_partials`, as the Ray engine does): before the
compute pass, one more read of the partition spills computes each partition's partials of
the values the formula whitens or scales by (a few numbers per batch value), merged into
the batch statistics that the compute pass then joins onto each partition. Group-level
estimators skip that read. If two keys share the first hash (about a 1e-6 chance in a
12M-group log), the run starts again with the exact key columns spilled instead of the
hashes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.columns import PART_INDEX, PART_ROW, RESPONSE_HASH
from grpo_cli.core.engine_options import ENGINES, EngineInfo, EngineOptions
from grpo_cli.core.errors import (
    GrpoAdvError,
    InputError,
    Message,
    first_line,
    is_disk_full,
    option,
)
from grpo_cli.core.expressions import with_group_stats
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan, hash_collision
from grpo_cli.core.run_summary import Repeats, RunSummary, response_id
from grpo_cli.core.schema import refuse_values, value_checks
from grpo_cli.engines import FileJob, check
from grpo_cli.engines.batch_partials import (
    applied,
    grouped_partials,
    merged_partials,
    merged_stats,
    needs_batch_stats,
    with_batch_stats,
)
from grpo_cli.engines.narrow import (
    CHECK,
    GROUP,
    check_batch_spans,
    inner_plan,
    merge_repeats,
    needed_columns,
    piece_repeats,
    piece_run_partials,
    response_hash,
)
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.io.read import scan_file

ROW: Final = PART_ROW
PART: Final = PART_INDEX
PARTITION_ROWS: Final = 2_000_000  # rows a partition holds, about (its memory: ~0.5 GB)
MIN_PARTITIONS: Final = 8
CHUNK_ROWS: Final = 1_000_000
MERGE_EVERY: Final = 64  # partitions whose partials are kept before merging them

if TYPE_CHECKING:
    from grpo_cli.core.resolve import Request


@dataclass(frozen=True)
class PartitionedEngine:
    """``--backend partitioned``: every response-level estimator on one Parquet file."""

    info: EngineInfo

    def refusal(self, plan: Plan | Request) -> Message | None:
        """Process supervision, positional groups and dropped singletons (it keeps every
        row, in order)."""
        options, estimator = plan.options, plan.estimator
        if estimator.unit == "step":
            return "process supervision"
        if options.group_size is not None:
            return option("group_size") + " (positional groups need the rows in order)"
        if options.singleton == "drop":
            return option("singleton", "drop") + " (it keeps every row)"
        return None

    def require(self) -> None:
        """Nothing optional: Polars and pyarrow."""

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Annotate the Parquet log ``job.sources[0]`` into the Parquet file
        ``job.output``, in a worker process that a signal can stop at once
        (:func:`run_isolated`)."""
        (source,) = job.sources
        return run_isolated(source, job.output, job.plan)


ENGINE = PartitionedEngine(ENGINES["partitioned"])


def annotate_to_parquet(
    source: Path,
    output: Path,
    options: AdvantageOptions,
    *,
    partitions: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> RunSummary:
    """Annotate the Parquet log ``source`` into the Parquet file ``output`` in bounded
    memory (see the module docstring) and return the run's figures (checks the log and
    makes the plan first). The engine's own entry, with its partitioning knobs for tests
    and benchmarks; users run a whole job with :func:`grpo_cli.jobs.run.run_job`
    (``engine={"backend": "partitioned"}``), which also writes atomically."""
    from grpo_cli.core.resolve import make_request, resolve

    request = make_request(None, options, EngineOptions(backend="partitioned"))
    check(ENGINE, request)
    return run(
        source,
        output,
        resolve(request, scan_file(source).collect_schema()),
        partitions=partitions,
        chunk_rows=chunk_rows,
    )


class _Collision(Exception):
    """Two group keys share the spilled 64-bit hash."""


def run(
    source: Path,
    output: Path,
    plan: Plan,
    *,
    partitions: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
    spill_root: Path | None = None,
) -> RunSummary:
    """The three passes (see the module docstring) for a checked ``plan``, in this
    process; on a hash collision, once more with the exact key spilled. ``partitions``
    defaults to one per PARTITION_ROWS input rows (at least MIN_PARTITIONS): memory stays
    at about one partition's whatever the log's size. Spills go to a new folder in
    ``spill_root`` (default: a tagged spill folder beside ``output``, removed at the end).
    """
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    if partitions is None:
        with _reading(source):
            rows = scan_file(source).select(pl.len()).collect().item()
        partitions = max(MIN_PARTITIONS, -(-rows // PARTITION_ROWS))
    own = spill_root is None
    root = make_spill_folder(spill_parent(output)) if spill_root is None else spill_root
    try:
        try:
            return _run(source, output, plan, partitions, chunk_rows, root, exact=False)
        except _Collision:
            return _run(source, output, plan, partitions, chunk_rows, root, exact=True)
    finally:
        if own:
            remove_spill_folder(root, after_error=sys.exc_info()[0] is not None)


@contextlib.contextmanager
def _reading(source: Path) -> Iterator[None]:
    """Report a failure to read ``source`` (a damaged page, a cut file: Polars' and
    Arrow's errors, or a panic of Polars' reader) as an input error naming it, with the
    cause in plain text. Our own errors, a full disk and interrupts pass unchanged."""
    from grpo_cli.io.formats import cannot_read
    from grpo_cli.io.read import PARQUET_DAMAGED_HINT

    try:
        yield
    except GrpoAdvError:
        raise
    except BaseException as exc:
        if not _read_failure(exc):
            raise
        raise cannot_read(str(source), "parquet", str(exc), PARQUET_DAMAGED_HINT) from None


def _read_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the data could not be read (rather than a bug of ours, a full
    disk or an interrupt): Polars' ComputeError, Arrow's errors, an OSError, a Polars
    panic (pyo3's PanicException)."""
    if isinstance(exc, KeyboardInterrupt | SystemExit) or is_disk_full(exc):
        return False
    import pyarrow as pa

    if type(exc).__name__ == "PanicException":
        return True
    return isinstance(exc, pl.exceptions.ComputeError | pa.ArrowException | OSError)


def _run(
    source: Path,
    output: Path,
    plan: Plan,
    partitions: int,
    chunk_rows: int,
    spill_root: Path,
    *,
    exact: bool,
) -> RunSummary:
    import shutil

    options = plan.options
    with _reading(source):
        schema = scan_file(source).collect_schema()
    needed = needed_columns(options, schema)
    response = response_id(schema, options)
    key_cols = plan.keys.exact
    spill = Path(tempfile.mkdtemp(dir=spill_root, prefix="exact." if exact else "hashed."))
    try:
        with _reading(source):
            _partition(source, spill / "in", needed, key_cols, partitions, response, exact=exact)
        group = key_cols if exact else (GROUP,)
        parts, repeats = _compute_partitions(
            spill, plan, group, chunk_rows, check_hash=not exact, response=response is not None
        )
        _merge(source, spill, output, options.added_columns(), chunk_rows)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    summary = _summary(parts)
    if response is None or repeats is None:
        return summary
    count, first = repeats
    with _reading(source):
        row = scan_file(source).slice(first, 1).select(*key_cols, response).collect()
    found = Repeats.of(count, response, row.row(0, named=True), key_cols)
    return replace(summary, repeats=found)


def _spill_options() -> Any:
    """Arrow IPC write options of the spill files: uncompressed. lz4 made them a quarter
    smaller but cost 1.5 s of 16 on 50M rows (compressing, then decompressing each once);
    the spills are read back once, from the page cache."""
    from pyarrow import ipc

    return ipc.IpcWriteOptions(compression=None)


def _partition(
    source: Path,
    folder: Path,
    needed: list[str],
    key_cols: tuple[str, ...],
    partitions: int,
    response: str | None,
    *,
    exact: bool,
) -> None:
    """Stream ``source`` into Arrow IPC spill files (uncompressed), a folder per partition, with
    Polars' streaming engine and its partitioned sink: rows keep their input order within
    a partition, and memory stays at a few batches whatever the log's size. The key goes
    as its two hashes (the second null where a key column is null), or ``exact``: as its
    columns; the ``response`` id column (when given) as its hash (null for a null id)."""
    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    ids = [] if response is None else [response]
    columns = list(dict.fromkeys([*needed, *key_cols, *ids]))
    spilled = list(dict.fromkeys([*key_cols, *needed])) if exact else [GROUP, CHECK, *needed]
    id_hashes = [response_hash(c) for c in ids]
    spilled += [RESPONSE_HASH for _ in ids]
    null_key = pl.any_horizontal(*(pl.col(c).is_null() for c in key_cols))
    rows = (
        scan_file(source)
        .select(columns)
        .with_row_index(ROW)
        .with_columns(
            key.hash(seed=0).alias(GROUP),
            # a null key: a null second hash, counted in the compute pass (value_checks)
            pl.when(null_key).then(None).otherwise(key.hash(seed=1)).alias(CHECK),
            *id_hashes,
        )
        .select(ROW, (pl.col(GROUP) % partitions).alias(PART), *spilled)
    )
    sink = pl.PartitionBy(folder, key=PART, include_key=False, approximate_bytes_per_file=None)
    rows.sink_ipc(sink, compression="uncompressed", mkdir=True)


def _partition_files(folder: Path) -> list[list[Path]]:
    """The spill files of each partition (a folder per partition value), in order."""
    return [sorted(part.glob("*.ipc")) for part in sorted(folder.iterdir()) if part.is_dir()]


def _compute_partitions(
    spill: Path,
    plan: Plan,
    group: tuple[str, ...],
    chunk_rows: int,
    *,
    check_hash: bool,
    response: bool = False,
) -> tuple[list[pl.DataFrame], tuple[int, int] | None]:
    """Annotate every partition with the Polars engine on the plan made for the whole log,
    its group key the spilled one (``group``); spill the advantages by range of row index
    (one file per ``chunk_rows`` input rows, each partition adding its rows of the range),
    keep the partials. The values of the keys and rewards are checked in the same pass
    (:func:`grpo_cli.core.schema.value_checks`, counted over every partition): once one shows
    something to refuse, the rest are only counted, and the run ends with the in-memory
    path's error; so does a group spanning batches (after the value checks, as there).
    With ``response`` (the spill holds RESPONSE_HASH), also the rows that repeat a
    response id within their group and the input row of the first of them (None without
    any; see :func:`grpo_cli.core.run_summary.repeated_rows`)."""
    import numpy as np
    from pyarrow import ipc

    options = plan.options
    uses_groups = plan.estimator.uses_groups
    totals: dict[str, int] = {}
    spans: InputError | None = None
    parts: list[pl.DataFrame] = []
    out = spill / "adv"
    out.mkdir()
    inner = inner_plan(plan, group, check_hash=check_hash)
    keys = inner.keys
    stats = _batch_stats(spill / "in", inner) if needs_batch_stats(inner) else None
    computed = inner if stats is None else applied(inner)
    writers: dict[int, ipc.RecordBatchFileWriter] = {}
    repeats: list[tuple[int, int] | None] = []
    try:
        for paths in _partition_files(spill / "in"):
            frame = pl.concat([pl.read_ipc(path) for path in paths])
            for path in paths:  # the spill shrinks as it goes: disk peaks at the first pass's
                path.unlink()
            null_key = pl.col(CHECK).is_null() if check_hash else None
            checks = value_checks(options, uses_groups, frame.schema, group_key_null=null_key)
            if checks:
                for name, count in frame.select(**checks).row(0, named=True).items():
                    totals[name] = totals.get(name, 0) + int(count or 0)
            if any(totals.values()) or spans is not None:
                continue  # refused below: only counted from now on
            if stats is not None:
                frame = with_batch_stats(frame, inner, stats)
            full = POLARS.annotate(frame, computed)
            if hash_collision(full, keys):
                raise _Collision()
            try:
                check_batch_spans(full, options, group, uses_groups=uses_groups)
            except InputError as exc:
                spans = exc
                continue
            table = full.select(ROW, *options.added_columns()).to_arrow()
            rows = table.column(0).to_numpy()  # ascending: the input order within a partition
            if not len(rows):
                continue
            first, last = int(rows[0]) // chunk_rows, int(rows[-1]) // chunk_rows
            edges = np.searchsorted(rows, np.arange(first, last + 2) * chunk_rows)
            for offset, (lo, hi) in enumerate(itertools.pairwise(edges)):
                if hi > lo:
                    writer = writers.get(first + offset)
                    if writer is None:
                        path = out / f"{first + offset:08d}.arrow"
                        writer = ipc.new_file(path, table.schema, options=_spill_options())
                        writers[first + offset] = writer
                    writer.write_table(table.slice(int(lo), int(hi - lo)))
            _accumulate(parts, full, options, group)
            if response:
                repeats.append(piece_repeats(full, group, ROW))
    finally:
        for writer in writers.values():
            writer.close()
    refuse_values(totals, options, uses_groups)
    if spans is not None:
        raise spans
    return parts, merge_repeats(repeats)


def _batch_stats(folder: Path, plan: Plan) -> pl.DataFrame:
    """The batch statistics the plan's formula reads, one row per batch value: each
    partition's mergeable partials (every group is whole in it, so its group statistics
    are exact), merged on the way every MERGE_EVERY partitions (see
    :mod:`grpo_cli.engines.batch_partials`). The spills stay for the compute pass. The values are
    checked there: a partition that will be refused only adds meaningless partials."""
    parts: list[pl.DataFrame] = []
    for paths in _partition_files(folder):
        frame = pl.concat([pl.read_ipc(path) for path in paths])
        grouped = with_group_stats(frame, plan).collect()
        if hash_collision(grouped, plan.keys):
            raise _Collision()
        parts.append(grouped_partials(grouped, plan))
        if len(parts) >= MERGE_EVERY:
            parts[:] = [merged_partials(parts, plan)]
    return merged_stats(parts, plan)


def _accumulate(
    parts: list[pl.DataFrame], full: pl.DataFrame, options: AdvantageOptions, group: tuple[str, ...]
) -> None:
    """Add the partials of the partition ``full`` to ``parts``, merged on the way every
    MERGE_EVERY partitions (every group lies whole in one partition; see
    :mod:`grpo_cli.core.metrics`). Unreduced partials (``reduce=False``: one query per
    partition) on the in-memory engine: a partition is small."""
    parts.append(piece_run_partials(full, options, group))
    if len(parts) >= MERGE_EVERY:
        parts[:] = [metrics.merge(parts)]


def _merge(
    source: Path, spill: Path, output: Path, columns: tuple[str, ...], chunk_rows: int
) -> None:
    """The input with its advantages, in input order, to one Parquet file.

    The advantages were spilled by range of row index (:func:`_compute_partitions`): each
    range's file holds every row of the range once, so its rows are put in input order by
    inverting their index (no sort), range after range, into a file of the added columns
    per range. A streaming horizontal concatenation of the input and those files then
    writes the output (about the cost of copying the input)."""
    import numpy as np
    import pyarrow as pa
    from pyarrow import ipc

    rows = scan_file(source).select(pl.len()).collect().item()
    ordered = spill / "ordered"
    ordered.mkdir()
    written = 0
    for path in sorted((spill / "adv").glob("*.arrow")):
        lo = int(path.stem) * chunk_rows
        with pa.memory_map(str(path)) as mapped:
            merged = ipc.open_file(mapped).read_all()
        path.unlink()
        index = merged.column(0).to_numpy()
        if lo != written or len(index) != min(chunk_rows, rows - lo):
            break  # a range missing or short: reported below
        position = np.empty(len(index), dtype=np.int64)
        position[index - lo] = np.arange(len(index))
        table = merged.select(list(columns)).take(position)
        with ipc.new_file(ordered / path.name, table.schema) as writer:
            writer.write_table(table)
        written += table.num_rows
    if written != rows or not rows:
        raise GrpoAdvError(
            "internal error: the spilled advantages do not cover the input rows",
            hint="run again without "
            + option("backend", "partitioned", alias="alone")
            + ", and report this",
        )
    from grpo_cli.io.formats import PARQUET_ZSTD_LEVEL

    # One file per range: a single file's pages stayed mapped until the end, all counted in
    # the peak RSS (2.19 GiB on 200M rows, against 1.00 GiB with one file per range).
    added = pl.scan_ipc(sorted(ordered.glob("*.arrow")))
    both = pl.concat([scan_file(source), added], how="horizontal")
    with _reading(source):  # the columns not read before are read here
        both.sink_parquet(output, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)


def _summary(parts: list[pl.DataFrame]) -> RunSummary:
    if not parts:
        raise GrpoAdvError(
            "internal error: no partition was computed",
            hint="run again without "
            + option("backend", "partitioned", alias="alone")
            + ", and report this",
        )
    return RunSummary.from_partials(metrics.merge(parts))


# --------------------------------------------------------------------------- the worker

POLL_S: Final = 0.05  # how often the command looks for a signal while the worker runs
SIGNALS: Final = {signal.SIGINT, signal.SIGTERM}


@dataclass(frozen=True)
class _WorkerJob:
    """What the worker of :func:`run_isolated` runs (pickled whole): :func:`run`'s
    arguments, and the command's process id (the worker ends if it is gone)."""

    source: Path
    output: Path
    plan: Plan
    spill: Path
    parent: int


def run_isolated(source: Path, output: Path, plan: Plan) -> RunSummary:
    """:func:`run` in a worker process (``multiprocessing``, spawned), with signals
    deferred in this one (:func:`grpo_cli.io.interrupts.deferred`): on Ctrl-C or SIGTERM
    the worker is killed (it writes nothing more), the spill folder removed, and the
    signal raised here, within about POLL_S seconds whatever the worker was doing. The
    worker's errors are raised here as they were raised there (input, output and usage
    errors; a full disk as an OSError, for the caller to name its path)."""
    from multiprocessing import get_context, resource_tracker
    from multiprocessing.connection import wait

    from grpo_cli.io import interrupts
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    context = get_context("spawn")
    # The spill folder is made and removed with signals deferred: a Ctrl-C the moment after
    # it exists must not escape before the cleanup that removes it is armed.
    with interrupts.deferred():
        spill = make_spill_folder(spill_parent(output))
        worker = None
        try:
            # The outcome comes back through a pipe, not a file: on a full disk the spill
            # folder's device may have no room left for it.
            receive, send = context.Pipe(duplex=False)
            job = _WorkerJob(source, output, plan, spill, os.getpid())
            worker = context.Process(target=_worker, args=(send, job), name="grpo-adv-worker")
            resource_tracker.ensure_running()  # its start unblocks signals: before ours
            # Blocked signals stay blocked across exec: a Ctrl-C to the terminal's process
            # group cannot reach the worker before it leaves the group (:func:`_worker`).
            signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
            try:
                worker.start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
                send.close()
            while not wait([receive, worker.sentinel], timeout=POLL_S):
                interrupts.check()  # raises the recorded signal, if any
            try:
                reply = receive.recv() if receive.poll() else None
            except EOFError:
                reply = None
            worker.join()
            outcome = _outcome(spill, worker.exitcode or 0, reply)
        finally:
            if worker is not None and worker.is_alive():
                worker.kill()
                worker.join()
            remove_spill_folder(spill)  # the worker, and its Polars threads, are gone
    return outcome


def _outcome(spill: Path, code: int, reply: tuple[Any, ...] | None) -> RunSummary:
    """The worker's result (``reply``), or its error raised here."""
    if reply is None:
        log = (spill / "worker.log").read_bytes().decode(errors="replace").strip()
        last = log.splitlines()[-1] if log else "no message"
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        raise GrpoAdvError(
            "internal error: the "
            + option("backend", "partitioned")
            + f" worker ended ({how}): {last}",
            hint="if it was killed for memory, free some; else this is a bug in grpo-adv: "
            "please report it with the command you ran",
        )
    kind, *rest = reply
    if kind == "disk_full":
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")
    if kind == "raised":
        raised: GrpoAdvError = rest[0]
        raise raised
    summary: RunSummary = rest[0]
    return summary


def _worker(reply: Connection, job: _WorkerJob) -> None:
    """The worker process of :func:`run_isolated`: out of the terminal's process group,
    dead with the command, its standard error in the spill folder's ``worker.log``; runs
    the job and sends the outcome back, then exits at once."""
    os.setsid()  # a terminal's Ctrl-C reaches the command only
    _die_with_parent(job.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command decides
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    with (job.spill / "worker.log").open("wb") as log:
        os.dup2(log.fileno(), 2)
    outcome: tuple[Any, ...]
    try:
        outcome = ("ok", run(job.source, job.output, job.plan, spill_root=job.spill))
    except GrpoAdvError as exc:
        outcome = ("raised", exc)  # pickled whole: its options stay structure
    except BaseException as exc:
        if is_disk_full(exc):
            outcome = ("disk_full",)
        else:
            detail = first_line(str(exc))
            internal = GrpoAdvError(
                f"internal error: {type(exc).__name__}: {detail}",
                hint="this is a bug in grpo-adv; please report it with the command you ran",
            )
            outcome = ("raised", internal)
    reply.send(outcome)
    os._exit(0)  # no interpreter teardown: the outcome is sent


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when its parent (the command, ``parent``)
    ends, also by ``kill -9``: no worker outlives the command (one that ended before
    this call is seen at once)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)

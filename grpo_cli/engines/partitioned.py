"""The partitioned engine (``--backend partitioned``, alias ``--low-memory``): a Parquet log
larger than memory to Parquet, in bounded memory, exact. Three streaming passes, spilling
uncompressed Arrow IPC to a temporary folder beside the output (each file removed once read):

1. **Partition**: the columns the formula reads, with each row's index, into ``partitions``
   files by a hash of the group key (every group whole in one file). The key is spilled as
   two 64-bit hashes: the first groups, the second detects a collision of the first (then
   the run starts again with the key's columns spilled).
2. **Compute**: each partition (about PARTITION_ROWS rows) annotated by the Polars engine
   with the plan made once for the log; the advantages spilled with their row index, a
   file per range of ``chunk_rows`` rows; the run's figures kept as mergeable partials
   (:mod:`grpo_cli.core.metrics`). A batch-level formula (GDPO) first reads every
   partition's batch partials (:mod:`grpo_cli.engines.batch_partials`).
3. **Merge**: each range's advantages put in input order by inverting their row index (no
   sort), beside the range's slice of the input, written to the output by a writer thread
   (:mod:`grpo_cli.io.parquet_stream`).

Null keys and null, infinite or huge rewards are counted in the compute pass (never from
the footer's statistics) and refused with the in-memory path's messages. A file that cannot
be read is an input error naming it. From the command line the passes run in a worker
process (:func:`run_isolated`): Ctrl-C or SIGTERM kills it (Polars' Rust threads ignore
signals) and the command exits 130 or 143 at once; the worker dies with the command
(``PR_SET_PDEATHSIG``). Peak memory: about one partition or one chunk.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core import metrics, progress
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
from grpo_cli.core.layouts import derived_column
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan, hash_collision, step_column
from grpo_cli.core.run_summary import (
    RunSummary,
    Spanning,
    piece_warnings,
    response_id,
    spanning_groups,
)
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
    appending_writers,
    check_batch_spans,
    hashed_key,
    inner_plan,
    keep_merging,
    merge_repeats,
    merge_spans,
    needed_columns,
    piece_repeats,
    piece_run_partials,
    response_hash,
    span_plan,
    spill_parts,
)
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.io.read import scan_file

ROW: Final = PART_ROW
PART: Final = PART_INDEX
PARTITION_ROWS: Final = 2_000_000  # rows a partition holds, about (its memory: ~0.5 GB)
MIN_PARTITIONS: Final = 8
CHUNK_ROWS: Final = 1_000_000
BATCH_ROWS: Final = 500_000  # rows read at a time by the partition pass
UNCOVERED: Final = "the spilled advantages do not cover the input rows"

if TYPE_CHECKING:
    from numpy.typing import NDArray

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
        """The Parquet log ``job.sources[0]`` into ``job.output``, in a worker process."""
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
    """Check, plan and annotate the Parquet log ``source`` into ``output`` in this process,
    with the partitioning knobs (for tests and benchmarks; users run
    :func:`grpo_cli.jobs.run.run_job`, which writes atomically)."""
    from grpo_cli.core.resolve import make_request, resolve

    request = make_request(None, options, EngineOptions(backend="partitioned"))
    check(ENGINE, request)
    plan = resolve(request, scan_file(source).collect_schema())
    return run(source, output, plan, partitions=partitions, chunk_rows=chunk_rows)


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
    """A checked ``plan``, in this process: the step pass (:mod:`grpo_cli.engines.steps`)
    when the plan allows it and the log turns out step-ordered, else the three passes (again
    with the exact key on a hash collision); the summary's ``route`` says which, and why.
    ``partitions``: one per PARTITION_ROWS rows, at least MIN_PARTITIONS, by default. Spills
    go to ``spill_root`` (default: a tagged spill folder beside ``output``, removed at the
    end)."""
    from grpo_cli.engines import steps

    reason = steps.why_not(plan)
    if reason is None:
        try:
            with _reading(source):
                summary = steps.run_steps(
                    source,
                    output,
                    plan,
                    batch_rows=min(chunk_rows, steps.BATCH_ROWS),
                    compute_rows=min(2 * chunk_rows, steps.COMPUTE_ROWS),
                )
            return replace(summary, route=f"one pass: the log is in {plan.step_col} order")
        except steps.NotStepOrdered as exc:
            reason = exc.reason
    return replace(
        _partitioned(source, output, plan, partitions, chunk_rows, spill_root),
        route=f"partitioned: {reason}",
    )


def _partitioned(
    source: Path,
    output: Path,
    plan: Plan,
    partitions: int | None,
    chunk_rows: int,
    spill_root: Path | None,
) -> RunSummary:
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    if partitions is None:
        partitions = max(MIN_PARTITIONS, -(-_row_count(source) // PARTITION_ROWS))
    root = spill_root or make_spill_folder(spill_parent(output))
    try:
        try:
            return _run(source, output, plan, partitions, chunk_rows, root, exact=False)
        except _Collision:
            return _run(source, output, plan, partitions, chunk_rows, root, exact=True)
    finally:
        if spill_root is None:
            remove_spill_folder(root, after_error=sys.exc_info()[0] is not None)


def _row_count(source: Path) -> int:
    """The rows of ``source``, as its footer says (the merge checks that the advantages
    cover them)."""
    with _reading(source):
        return int(scan_file(source).select(pl.len()).collect().item())


@contextlib.contextmanager
def _reading(source: Path) -> Iterator[None]:
    """A failure to read ``source`` (Polars' ComputeError, Arrow's errors, an OSError, a
    panic of Polars' reader) as an input error naming it; our own errors, a full disk and
    interrupts pass unchanged."""
    import pyarrow as pa

    from grpo_cli.io.formats import cannot_read
    from grpo_cli.io.read import PARQUET_DAMAGED_HINT

    unreadable = pl.exceptions.ComputeError | pa.ArrowException | OSError
    try:
        yield
    except BaseException as exc:  # pyo3's PanicException is a BaseException
        read = type(exc).__name__ == "PanicException" or isinstance(exc, unreadable)
        if not read or isinstance(exc, GrpoAdvError) or is_disk_full(exc):
            raise
        raise cannot_read(str(source), "parquet", str(exc), PARQUET_DAMAGED_HINT) from None


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
    step = step_column(plan)  # spilled too, to find groups that span it
    needed = list(dict.fromkeys([*needed_columns(options, schema), *([step] if step else [])]))
    response = response_id(schema, options)
    key_cols = plan.keys.exact
    spill = Path(tempfile.mkdtemp(dir=spill_root, prefix="exact." if exact else "hashed."))
    rows = _row_count(source)  # the passes' progress
    try:
        progress.stage("partitioning", rows)
        with _reading(source):
            _partition(source, plan, spill / "in", needed, partitions, response, exact=exact)
        group = key_cols if exact else (GROUP,)
        parts, repeats, spanned = _compute_partitions(
            spill,
            plan,
            group,
            chunk_rows,
            check_hash=not exact,
            response=response,
            step=step,
            total_rows=rows,
        )
        _merge(source, spill, output, options.added_columns(), chunk_rows, rows)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    if not parts:
        raise _internal("no partition was computed")
    merged = metrics.merge(parts)
    columns = [*key_cols, *([response] if response else [])]

    def row(index: int) -> dict[str, Any]:
        with _reading(source):
            return (
                _scan(source, plan.derived)
                .slice(index, 1)
                .select(columns)
                .collect()
                .row(0, named=True)
            )

    notices = piece_warnings(plan, merged, spanned, repeats, response, row)
    return replace(RunSummary.from_partials(merged), notices=notices)


def _scan(source: Path, derived: Sequence[str]) -> pl.LazyFrame:
    """``source`` lazily, with the key columns its dump layout derives (a verl dump's uid
    group; never written: :func:`_merge` reads the file itself)."""
    frame = scan_file(source)
    return frame.with_columns([derived_column(n) for n in derived]) if derived else frame


def _partition(
    source: Path,
    plan: Plan,
    folder: Path,
    needed: list[str],
    partitions: int,
    response: str | None,
    *,
    exact: bool,
) -> None:
    """Stream ``source`` into a spill file per partition, BATCH_ROWS rows at a time (input
    order kept within a partition; Polars' partitioned sink buffered about 3 MB for each
    partition: 2.2 GiB at 500). The key goes as its two hashes (the second null for a null
    key), or ``exact`` as its columns; the ``response`` id as its hash."""
    key_cols = plan.keys.exact
    group_hash, check_hash = hashed_key(key_cols)
    ids = [] if response is None else [response]
    columns = list(dict.fromkeys([*needed, *key_cols, *ids]))
    spilled = list(dict.fromkeys([*key_cols, *needed])) if exact else [GROUP, CHECK, *needed]
    id_hashes = [response_hash(c) for c in ids]
    spilled += [RESPONSE_HASH for _ in ids]
    null_key = pl.any_horizontal(*(pl.col(c).is_null() for c in key_cols))
    rows = (
        _scan(source, plan.derived)
        .select(columns)
        .with_row_index(ROW)
        .with_columns(
            group_hash,
            # a null key: a null second hash, counted in the compute pass (value_checks)
            pl.when(null_key).then(None).otherwise(check_hash).alias(CHECK),
            *id_hashes,
        )
        .select(ROW, (pl.col(GROUP) % partitions).alias(PART), *spilled)
    )
    spill_parts(rows, folder, BATCH_ROWS)


def _partition_files(folder: Path) -> list[Path]:
    """The spill file of each partition, in order of name."""
    return sorted(folder.glob("*.arrow"))


def _read_partition(path: Path) -> pl.DataFrame:
    """A partition's spill file in one chunk: it holds a record batch per batch of the
    partition pass (rows / BATCH_ROWS), and annotating 250 chunks of 2M rows peaked
    200 MB higher than one."""
    return pl.read_ipc(path).rechunk()


def _compute_partitions(
    spill: Path,
    plan: Plan,
    group: tuple[str, ...],
    chunk_rows: int,
    *,
    check_hash: bool,
    response: str | None = None,
    step: str | None = None,
    total_rows: int | None = None,
) -> tuple[list[pl.DataFrame], tuple[int, int] | None, Spanning | None]:
    """Annotate every partition (its group key ``group``), spill the advantages by range of
    ``chunk_rows`` row indices, keep the partials. The values are counted over every
    partition (:func:`grpo_cli.core.schema.value_checks`; after one to refuse, the rest are
    only counted) and refused, then a group spanning batches, as the in-memory path does.
    With ``response``, also the rows repeating a response id and the first one's row; with
    ``step``, the groups spanning it (:func:`grpo_cli.core.run_summary.spanning_groups`).
    Progress: the rows of each partition read, of ``total_rows`` in all."""
    options = plan.options
    uses_groups = plan.estimator.uses_groups
    totals: dict[str, int] = {}
    spans: InputError | None = None
    parts: list[pl.DataFrame] = []
    out = spill / "adv"
    out.mkdir()
    inner = inner_plan(plan, group, check_hash=check_hash)
    keys = inner.keys
    stats = _batch_stats(spill / "in", inner, total_rows) if needs_batch_stats(inner) else None
    progress.stage("computing", total_rows)
    computed = inner if stats is None else applied(inner)
    repeats: list[tuple[int, int] | None] = []
    spanned: list[Spanning | None] = []
    with appending_writers() as write:
        for path in _partition_files(spill / "in"):
            frame = _read_partition(path)
            path.unlink()  # the spill shrinks as it goes: disk peaks at the first pass's
            progress.advance(frame.height)
            null_key = pl.col(CHECK).is_null() if check_hash else None
            checks = value_checks(options, uses_groups, frame.schema, group_key_null=null_key)
            if checks:
                for name, count in frame.select(**checks).row(0, named=True).items():
                    totals[name] = totals.get(name, 0) + int(count or 0)
            if any(totals.values()) or spans is not None:
                continue  # refused below: only counted from now on
            if stats is not None:
                frame = with_batch_stats(frame, inner, stats)
            full = POLARS.annotate(frame, span_plan(computed, frame, step))
            if hash_collision(full, keys):
                raise _Collision()
            try:
                check_batch_spans(full, options, group, uses_groups=uses_groups)
            except InputError as exc:
                spans = exc
                continue
            added = full.select(ROW, *options.added_columns())
            for index, lo, hi in _ranges(added.get_column(ROW).to_numpy(), chunk_rows):
                write(out / f"{index:08d}.arrow", added.slice(lo, hi - lo))
            keep_merging(parts, piece_run_partials(full, options, group), metrics.merge)
            if response:
                repeats.append(piece_repeats(full, group, ROW))
            if step:
                spanned.append(spanning_groups(full, group, step, ROW))
    refuse_values(totals, options, uses_groups)
    if spans is not None:
        raise spans
    return parts, merge_repeats(repeats), merge_spans(spanned)


def _ranges(row: NDArray[Any], chunk_rows: int) -> Iterator[tuple[int, int, int]]:
    """For ascending row indices ``row`` (a partition keeps the input order), each range
    ``index`` (rows ``index * chunk_rows`` on) they reach, with its positions ``lo:hi``
    (a search, not a division and a split: that cost 15% of the pass)."""
    import numpy as np

    if not len(row):
        return
    first, last = int(row[0]) // chunk_rows, int(row[-1]) // chunk_rows
    cuts = np.searchsorted(row, np.arange(first + 1, last + 1) * chunk_rows).tolist()
    for index, lo, hi in zip(range(first, last + 1), [0, *cuts], [*cuts, len(row)], strict=True):
        if hi > lo:
            yield index, lo, hi


def _batch_stats(folder: Path, plan: Plan, rows: int | None) -> pl.DataFrame:
    """The batch statistics the formula reads, one row per batch value, from each
    partition's partials (:mod:`grpo_cli.engines.batch_partials`); the spills stay. The
    values are checked in the compute pass. Progress: the rows of each partition read."""
    progress.stage("batch statistics", rows)
    parts: list[pl.DataFrame] = []
    for path in _partition_files(folder):
        frame = _read_partition(path)
        progress.advance(frame.height)
        grouped = with_group_stats(frame, plan).collect()
        if hash_collision(grouped, plan.keys):
            raise _Collision()
        keep_merging(
            parts, grouped_partials(grouped, plan), lambda kept: merged_partials(kept, plan)
        )
    return merged_stats(parts, plan)


def _merge(
    source: Path, spill: Path, output: Path, columns: tuple[str, ...], chunk_rows: int, rows: int
) -> None:
    """The input (``rows`` rows) with its advantages to one Parquet file, a range of
    ``chunk_rows`` rows at a time: the range's slice of the input (only the row groups it
    covers are read) beside its advantages put in input order by inverting their row index,
    written by :class:`grpo_cli.io.parquet_stream.ParquetStream` (Polars' streaming sink
    held more the longer the log: this pass peaked at 0.78 GiB for 200M rows and 1.0 GiB
    for 1B)."""
    from grpo_cli.io.parquet_stream import ParquetStream

    paths = sorted((spill / "adv").glob("*.arrow"))
    if not rows or [int(path.stem) for path in paths] != list(range(-(-rows // chunk_rows))):
        raise _internal(UNCOVERED)
    progress.stage("writing", rows)
    scan = scan_file(source)
    writer = ParquetStream(output, plain=columns)
    try:
        for lo, path in zip(range(0, rows, chunk_rows), paths, strict=True):
            count = min(chunk_rows, rows - lo)
            with _reading(source):  # the columns not read before are read here
                inputs = scan.slice(lo, count).collect()
            if inputs.height != count:
                raise _internal(UNCOVERED)
            added = _in_order(path, lo, count, columns)
            writer.put(pl.concat([inputs, added], how="horizontal").to_arrow())
            progress.advance(count)
        writer.close()
    except BaseException:
        writer.abandon()
        raise


def _in_order(path: Path, lo: int, rows: int, columns: tuple[str, ...]) -> pl.DataFrame:
    """The ``columns`` of the spilled range at ``path`` (``rows`` rows from row ``lo``) in
    row order (removed once read), by inverting their row index: no sort."""
    import numpy as np

    spilled = pl.read_ipc(path)
    path.unlink()
    index = spilled.get_column(ROW).to_numpy()
    if len(index) != rows:
        raise _internal(UNCOVERED)
    position = np.empty(rows, dtype=np.int64)
    position[index - lo] = np.arange(rows)
    return spilled.select(columns)[position]


def _internal(what: str) -> GrpoAdvError:
    return GrpoAdvError(
        f"internal error: {what}",
        hint="run again without "
        + option("backend", "partitioned", alias="alone")
        + ", and report this",
    )


# --------------------------------------------------------------------------- the worker

POLL_S: Final = 0.05  # how often the command looks for a signal while the worker runs
FORWARD_S: Final = 0.2  # how often, at most, the worker sends the rows done
SIGNALS: Final = {signal.SIGINT, signal.SIGTERM}


def run_isolated(source: Path, output: Path, plan: Plan) -> RunSummary:
    """:func:`run` in a spawned worker process, signals deferred here: on Ctrl-C or
    SIGTERM the worker is killed, the spill folder removed and the signal raised here
    within about POLL_S seconds. The worker's errors are raised here as raised there (a
    full disk as an OSError, for the caller to name its path); its progress is shown on
    the display installed here (:mod:`grpo_cli.core.progress`)."""
    from multiprocessing import get_context, resource_tracker
    from multiprocessing.connection import wait

    from grpo_cli.io import interrupts
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    context = get_context("spawn")
    with interrupts.deferred():  # no signal between the spill folder and its cleanup
        spill = make_spill_folder(spill_parent(output))
        worker = None
        try:
            receive, send = context.Pipe(duplex=False)  # not a file: the disk may be full
            job = (source, output, plan, spill, os.getpid())
            worker = context.Process(target=_worker, args=(send, *job), name="grpo-adv-worker")
            resource_tracker.ensure_running()  # its start unblocks signals: before ours
            # Blocked signals stay blocked across exec: a Ctrl-C to the terminal's process
            # group cannot reach the worker before it leaves the group (:func:`_worker`).
            signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
            try:
                worker.start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
                send.close()
            reply = None
            while reply is None:
                ready = wait([receive, worker.sentinel], timeout=POLL_S)
                interrupts.check()  # raises the recorded signal, if any
                if not ready:
                    continue
                try:
                    message = receive.recv() if receive.poll() else None
                except EOFError:
                    message = None
                if message is None:
                    break  # the worker ended without a word
                reply = _progress(message)
            worker.join()
            outcome = _outcome(spill, worker.exitcode or 0, reply)
        finally:
            if worker is not None and worker.is_alive():
                worker.kill()
                worker.join()
            remove_spill_folder(spill)  # the worker, and its Polars threads, are gone
    return outcome


def _progress(message: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A message of the worker's :class:`_Forward` shown here (None), or its outcome."""
    kind, *values = message
    if kind == "stage":
        progress.stage(*values)
    elif kind == "rows":
        progress.advance(*values)
    else:
        return message
    return None


class _Forward:
    """The worker's progress display: each stage sent to the command at once, the rows
    done at most every FORWARD_S seconds (and before the next stage or the outcome)."""

    def __init__(self, pipe: Connection) -> None:
        self.pipe, self.rows, self.sent = pipe, 0, 0.0

    def add(self, description: str, total: int | None, unit: str | None = None) -> None:
        self.flush()
        self.pipe.send(("stage", description, total))

    def advance(self, task: Any, steps: int = 1) -> None:
        self.rows += steps
        if time.monotonic() - self.sent >= FORWARD_S:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.pipe.send(("rows", self.rows))
            self.rows = 0
        self.sent = time.monotonic()


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
    kind, value = reply
    if kind == "raised":
        raise value
    summary: RunSummary = value
    return summary


def _worker(
    reply: Connection, source: Path, output: Path, plan: Plan, spill: Path, parent: int
) -> None:
    """The worker process of :func:`run_isolated`: out of the terminal's process group,
    dead with the command (``parent``), its standard error in ``spill/worker.log``; sends
    the outcome back, then exits at once."""
    import errno

    os.setsid()  # a terminal's Ctrl-C reaches the command only
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command decides
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    with (spill / "worker.log").open("wb") as log:
        os.dup2(log.fileno(), 2)
    outcome: tuple[str, Any]
    forward = _Forward(reply)
    try:
        with progress.reporting(forward):
            outcome = ("ok", run(source, output, plan, spill_root=spill))
        forward.flush()
    except GrpoAdvError as exc:
        outcome = ("raised", exc)  # pickled whole: its options stay structure
    except BaseException as exc:
        if is_disk_full(exc):
            outcome = ("raised", OSError(errno.ENOSPC, "No space left on device"))
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

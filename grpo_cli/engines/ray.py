"""The Ray engine (``--backend ray``): reward logs spread over many files and machines, with
Ray tasks. Only what the formula reads crosses the network.

The inputs are cut into **pieces** (an input file, or PIECE_ROWS rows of a large Parquet
file), the unit of reading and of writing: its output part is named after it and holds its
rows in order.

1. **Map** (a task per batch of pieces): read the columns the formula reads, run every
   input check of the in-memory path, send each row's narrow form
   (:mod:`grpo_cli.engines.narrow`: the key as two 64-bit hashes, the rewards, a locator
   piece << 40 | row) to the partition of its group hash (32 bytes a row).
2. **Batch statistics** (batch-level formulas, GDPO): each partition's partials merged on
   the driver (:mod:`grpo_cli.engines.batch_partials`) and handed to every partition.
3. **Reduce** (a task per partition, every group whole in it): the Polars engine on the
   plan made once; the added columns sent back to their pieces with their locators (16
   bytes a row), the run's partials to the driver. With ``--summary DIR``, each partition
   writes its rows of the per-group table (the key then moves as its columns).
4. **Write** (a task per batch): each piece read again, its advantages put in row order by
   inverting their row numbers (no sort), its part written beside its name and renamed
   (a task Ray runs again replaces its own part).

Two keys sharing a group hash: the run starts again with the key's columns moved. The
driver never holds the data, only partials and byte counts.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import GrpoAdvError, InputError, Message, OptionsError, option
from grpo_cli.core.plan import step_column
from grpo_cli.core.run_summary import RunSummary, piece_warnings
from grpo_cli.engines import FileJob, ray_tasks
from grpo_cli.engines.batch_partials import merged_stats, needs_batch_stats
from grpo_cli.engines.narrow import merge_repeats, merge_spans
from grpo_cli.engines.ray_cluster import chain, import_ray, session
from grpo_cli.engines.ray_tasks import PIECE_STRIDE, ROW_BITS, Piece, Shuffle
from grpo_cli.io.read import scan_file

if TYPE_CHECKING:
    from grpo_cli.core.plan import Plan
    from grpo_cli.core.resolve import Request

READ_BATCH_ROWS: Final = 65_536  # rows per batch when an unreadable input is looked for
PIECE_ROWS: Final = 4_000_000  # rows of a piece of a large Parquet file (one output part)
PARTITION_ROWS: Final = 2_000_000  # rows of a partition, about (a reduce task: ~0.3 GB)
MAX_PARTITIONS: Final = 4096
BATCH_BYTES: Final = 256 << 20  # input file bytes a map or write task reads, at most
MIN_BATCH_ROWS: Final = 100_000  # rows a batch may hold in any case
TEXT_ROW_BYTES: Final = 200  # a JSONL or CSV row, to guess a text file's rows


@dataclass(frozen=True)
class RayEngine:
    """``--backend ray``: every estimator that reads rows in no particular order."""

    info: EngineInfo

    def refusal(self, plan: Plan | Request) -> Message | None:
        """Positional groups and process supervision (they need the rows in order), and
        dropped singletons (each part holds every row of its input)."""
        if plan.estimator.unit == "step":
            return "process supervision (its steps need the rows in order)"
        if plan.options.group_size is not None:
            return option("group_size") + " (positional groups need the rows in order)"
        if plan.options.singleton == "drop":
            return option("singleton", "drop") + " (each part holds every row of its input)"
        return None

    def require(self) -> None:
        """Ray, or the install hint."""
        import_ray()

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Map, (batch statistics), reduce and write ``job.sources`` into the folder
        ``job.output``. Errors raised on the cluster come back as raised; an input Parquet
        cannot read is named (exit 3); the cluster lost is exit 4."""
        address = job.plan.engine.ray_address
        staging = [p for p in (job.output, job.groups) if p is not None]
        notes = job.notes or (lambda _: None)
        pieces, casts = _pieces(job)  # its refusals before Ray starts
        with session(address, notes=notes, staging=staging, fatal=job.fatal) as ray:
            logging.getLogger("ray").setLevel(logging.CRITICAL)  # grpo-adv says what failed
            try:
                cpus = int(ray.cluster_resources().get("CPU", 1))
                layout = (pieces, casts, _partitions(cpus, pieces), cpus)
                exact = job.groups is not None  # the table shows the keys' values
                try:
                    return _run(ray, job, *layout, exact=exact)
                except _Collision:
                    return _run(ray, job, *layout, exact=True)
            except GrpoAdvError:
                raise
            except Exception as exc:
                cause = _grpo_cause(exc) or _unreadable_input(job)
                if cause is not None:
                    raise cause from None
                raise


ENGINE = RayEngine(ENGINES["ray"])
LOG: Final = logging.getLogger(__name__)


class _Collision(Exception):
    """Two group keys share the moved 64-bit hash."""


Casts = tuple[tuple[str, pl.DataType], ...]


def _run(
    ray: Any, job: FileJob, pieces: list[Piece], casts: Casts, count: int, cpus: int, *, exact: bool
) -> RunSummary:
    """One try, on ``count`` partitions (``casts``: see :class:`ray_tasks.Shuffle`)."""
    shuffle = Shuffle(job.plan, job.derived, count, exact, casts, job.response)
    batches = _batches(pieces, cpus)
    batch_of = tuple(b for b, batch in enumerate(batches) for _ in batch)
    remote = ray.remote(max_retries=3)
    split = remote(ray_tasks.split_pieces).options(num_returns=count + 1)
    mapped = [split.remote(batch, shuffle) for batch in batches]
    into = [[refs[k] for refs in mapped] for k in range(count)]  # partition k's inputs
    stats: pl.DataFrame | None = None
    if needs_batch_stats(job.plan):
        partial = remote(ray_tasks.partition_batch_partials)
        partials = ray.get([partial.remote(shuffle, *into[k]) for k in range(count)])
        if any(p is None for p in partials):
            raise _Collision()
        stats = merged_stats(partials, shuffle.inner)
    compute = remote(ray_tasks.compute_partition).options(num_returns=len(batches) + 1)
    groups = None if job.groups is None else str(job.groups)
    reduced = [compute.remote(k, batch_of, shuffle, stats, groups, *into[k]) for k in range(count)]
    sent = sum(b for _, b in ray.get([refs[-1] for refs in mapped]))
    del mapped, into  # each partition's rows are freed once its reduce task is done
    finished = ray.get([refs[-1] for refs in reduced])
    if any(partial is None for partial, *_ in finished):
        raise _Collision()
    write = remote(ray_tasks.write_pieces)
    back_to = [[refs[b] for refs in reduced] for b in range(len(batches))]  # batch b's rows
    written = ray.get(
        [write.remote(bt, str(job.output), shuffle, *back_to[b]) for b, bt in enumerate(batches)]
    )
    for folder in (job.output, job.groups):
        if folder is not None:
            ray_tasks.remove_partials(folder)  # left by workers that died while writing
    rows = sum(written)
    if not rows:
        raise InputError("the inputs have no rows", hint="check the paths given")
    back = sum(b for _, b, *_ in finished)
    LOG.info(
        "shuffled %d bytes to the partitions (%.1f a row) and %d back (%.1f a row); "
        "%d pieces in %d batches, %d partitions",
        sent, sent / rows, back, back / rows, len(pieces), len(batches), count,
    )  # fmt: skip
    merged = metrics.merge([p for p, *_ in finished])

    def row(locator: int) -> dict[str, Any]:
        piece = pieces[locator >> ROW_BITS]
        return ray_tasks.piece_row(piece, locator & (PIECE_STRIDE - 1), shuffle)

    repeats = merge_repeats(r for _, _, r, _ in finished)
    spanned = merge_spans(s for *_, s in finished)
    notices = piece_warnings(job.plan, merged, spanned, repeats, job.response, row)
    return replace(RunSummary.from_partials(merged), notices=notices)


def _pieces(job: FileJob) -> tuple[list[Piece], Casts]:
    """The inputs cut into pieces: a Parquet file of more than PIECE_ROWS rows into ranges,
    any other file whole; each named after its input, relative to the inputs' common folder
    (``a/x.jsonl`` -> ``a/x.parquet``; ranges ``x-00000.parquet``, ...)."""
    import os

    from grpo_cli.io.formats import DATA_FORMATS, FORMATS, describe, format_from_suffix

    named = [name for name in DATA_FORMATS if FORMATS[name].by_suffix]
    formats = {job.input_format or format_from_suffix(p) or "" for p in job.sources}
    if len(formats) != 1 or not formats <= set(named):
        raise OptionsError(
            option("backend", "ray") + f" reads {describe(named)} files of one format",
            hint="give files of one format (by suffix), or name it with " + option("input_format"),
        )
    fmt = formats.pop()
    # Named after the paths given, links not followed (a Hugging Face snapshot's
    # step_1.parquet links to blobs/<sha>: its part is step_1.parquet).
    paths = [Path(os.path.abspath(p)) for p in job.sources]  # noqa: PTH100 (no resolve)
    root = Path(os.path.commonpath([p.parent for p in paths]))
    stems = [_stem(p.relative_to(root)) for p in paths]
    if len(set(stems)) != len(stems):  # x.jsonl and x.jsonl.gz: the whole names
        stems = [str(p.relative_to(root)) for p in paths]
    pieces: list[Piece] = []
    schemas: list[pl.Schema] = []  # of the Parquet files, from the same footer read
    for given, path, stem in zip(job.sources, paths, stems, strict=True):
        rows, schema = _footer(given, fmt)
        if schema is not None:
            schemas.append(schema)
        size = path.stat().st_size
        if rows is None or rows <= PIECE_ROWS:
            pieces.append(Piece(len(pieces), str(path), fmt, 0, rows, f"{stem}.parquet", size))
            continue
        for k, offset in enumerate(range(0, rows, PIECE_ROWS)):
            part = min(PIECE_ROWS, rows - offset)
            name = f"{stem}-{k:05d}.parquet"
            pieces.append(
                Piece(len(pieces), str(path), fmt, offset, part, name, size * part // rows)
            )
    _check_part_names(pieces)
    return pieces, _casts(job.plan, schemas)


def _check_part_names(pieces: Sequence[Piece]) -> None:
    """Refuse two pieces with one part name (``x.parquet``'s range ``x-00001`` and an input
    ``x-00001.parquet``)."""
    seen: dict[str, Piece] = {}
    for piece in pieces:
        other = seen.setdefault(piece.name, piece)
        if other is not piece:
            raise OptionsError(
                f"the inputs {other.path} and {piece.path} would both be written as the "
                f"part {piece.name}",
                hint=f"rename one of them (a Parquet file of more than {PIECE_ROWS:,} rows "
                "is written as ranges NAME-00000.parquet, NAME-00001.parquet, ...)",
            )


def _casts(plan: Plan, schemas: Sequence[pl.Schema]) -> Casts:
    """The key, batch and step columns whose type differs between the Parquet inputs'
    ``schemas``, with their supertype (text inputs' keys are read as text)."""
    columns = [c for c in (*plan.keys.exact, plan.options.batch_col, step_column(plan)) if c]
    casts = []
    for column in dict.fromkeys(columns):  # a batch column may be a key column too
        found = {schema[column] for schema in schemas if column in schema}
        if len(found) < 2:
            continue
        empty = [pl.DataFrame(schema={column: t}) for t in found]
        try:
            casts.append((column, pl.concat(empty, how="diagonal_relaxed").schema[column]))
        except pl.exceptions.PolarsError:
            raise InputError(
                f"the inputs' column {column!r} has types that do not combine: "
                + ", ".join(sorted(str(t) for t in found)),
                hint="the files must share their column types",
                column=column,
            ) from None
    return tuple(casts)


def _batches(pieces: Sequence[Piece], cpus: int) -> list[tuple[Piece, ...]]:
    """Consecutive pieces in batches (a map and a write task each): at most PIECE_ROWS rows,
    BATCH_BYTES of input, and the share of the log that gives every core two batches
    unless below MIN_BATCH_ROWS; a larger piece is a batch alone."""
    total = sum(_rows(p) for p in pieces)
    limit = max(MIN_BATCH_ROWS, min(PIECE_ROWS, -(-total // (2 * cpus))))
    batches: list[list[Piece]] = []
    rows = size = 0
    for piece in pieces:
        piece_rows, piece_bytes = _rows(piece), piece.size
        if not batches or rows + piece_rows > limit or size + piece_bytes > BATCH_BYTES:
            batches.append([])
            rows = size = 0
        batches[-1].append(piece)
        rows += piece_rows
        size += piece_bytes
    return [tuple(batch) for batch in batches]


def _rows(piece: Piece) -> int:
    """``piece``'s rows, or for a whole text file a guess from its size."""
    if piece.rows is not None:
        return piece.rows
    return piece.size // TEXT_ROW_BYTES


def _stem(relative: Path) -> str:
    """``a/x.jsonl.gz`` -> ``a/x``: the path without its format's suffixes."""
    from grpo_cli.io.formats import uncompressed_name

    name = uncompressed_name(relative)
    return str(Path(name).with_suffix("")) if Path(name).suffix else str(name)


def _footer(path: Path, fmt: str) -> tuple[int | None, pl.Schema | None]:
    """The row count and schema (as Polars reads it; None if it cannot) of a file its
    format ``fmt`` scans (:func:`grpo_cli.io.formats.scanned_format`); (None, None) for
    any other file, which the map task reads whole with grpo-adv's reader. A footer the
    format's check refuses is refused here, before Ray starts (Polars panics on the
    workers otherwise)."""
    from grpo_cli.io.formats import scanned_format

    scanned = scanned_format(path)
    if scanned is None or scanned.name != fmt or scanned.rows is None:
        return None, None
    rows = scanned.rows(path, str(path), scanned.parse_hint)
    try:
        return rows, scan_file(path).collect_schema()
    except Exception:
        return rows, None


def _partitions(cpus: int, pieces: Sequence[Piece]) -> int:
    """About PARTITION_ROWS rows a partition, in a multiple of the CPUs (every round of
    reduce tasks keeps every core busy), at most MAX_PARTITIONS."""
    rows = sum(_rows(p) for p in pieces)
    rounds = max(1, -(-rows // (cpus * PARTITION_ROWS)))
    return min(MAX_PARTITIONS, rounds * cpus)


def _grpo_cause(exc: BaseException) -> GrpoAdvError | None:
    """The grpo-adv error a task raised (its structure kept), out of Ray's wrappers."""
    found = (e for e in chain(exc) if isinstance(e, GrpoAdvError))
    return next((copy.copy(e) for e in found), None)


def _unreadable_input(job: FileJob) -> InputError | None:
    """After a failure on the cluster: the first scanned input (:func:`_footer`) this
    machine cannot read either, with the Polars engine's error for it; None when every
    one reads. Read batch by batch (bounded memory)."""
    from grpo_cli.io.formats import scanned_format
    from grpo_cli.io.read import parse_error

    for path in job.sources:
        scanned = scanned_format(path)
        if scanned is None or scanned.rows is None:
            continue
        name = str(path)
        try:
            scanned.rows(path, name, scanned.parse_hint)
            for _ in scan_file(path).collect_batches(chunk_size=READ_BATCH_ROWS):
                pass
        except InputError as exc:
            return exc
        except Exception as exc:
            return parse_error(b"", scanned.name, name, exc)
    return None

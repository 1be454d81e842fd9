"""The Ray engine's tasks (:mod:`grpo_cli.engines.ray`): plain functions of plain values,
made Ray tasks by the driver; a task run again after its worker died does the same again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core.columns import PREFIX, RAY_LOCATOR, RAY_PARTITION
from grpo_cli.core.expressions import with_group_stats
from grpo_cli.core.plan import Plan, hash_collision, step_column
from grpo_cli.core.run_summary import spanning_groups
from grpo_cli.core.schema import check_added_columns, check_frame
from grpo_cli.engines.batch_partials import (
    applied,
    grouped_partials,
    with_batch_stats,
)
from grpo_cli.engines.narrow import (
    CHECK,
    GROUP,
    check_batch_spans,
    hashed_key,
    inner_plan,
    needed_columns,
    piece_repeats,
    piece_run_partials,
    read_columns,
    response_hash,
    span_plan,
)
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.io.formats import PARQUET_ZSTD_LEVEL
from grpo_cli.io.read import read_rewards, scan_file

if TYPE_CHECKING:
    import pyarrow as pa

LOCATOR: Final = RAY_LOCATOR
PARTITION: Final = RAY_PARTITION  # the partition a row goes to (and its piece, on the way back)
ROW_BITS: Final = 40  # a locator is piece << ROW_BITS | row: 2^40 rows a piece, 2^23 pieces
PIECE_STRIDE: Final = 1 << ROW_BITS


@dataclass(frozen=True)
class Piece:
    """One unit of input and of output: an input file, or a row range of a large Parquet
    file. ``index``: the high bits of its rows' locators; ``fmt``: its format's name;
    ``rows``: None for a whole file read by grpo-adv's reader; ``name``: its output part's
    path in the output folder; ``size``: the bytes of its input it reads."""

    index: int
    path: str
    fmt: str
    offset: int
    rows: int | None
    name: str
    size: int = 0


@dataclass(frozen=True)
class Shuffle:
    """What every task of one run shares: the plan of the whole log; the key columns a
    dump layout ``derived`` from each row (never written); the partition count; ``exact``:
    the key moves as its columns, not as two hashes; ``casts``: key and batch columns typed
    differently between files, with their supertype (``7`` and ``"7"`` are one prompt),
    cast before hashing; the ``response`` id column, moved as its hash, or None. The step
    column groups should not span (:func:`grpo_cli.core.plan.step_column`) moves too."""

    plan: Plan
    derived: tuple[str, ...]
    partitions: int
    exact: bool
    casts: tuple[tuple[str, pl.DataType], ...] = ()
    response: str | None = None

    @property
    def group(self) -> tuple[str, ...]:
        """The moved group key."""
        return self.plan.keys.exact if self.exact else (GROUP,)

    @property
    def step(self) -> str | None:
        """The step column whose spanning groups each partition finds, or None."""
        return step_column(self.plan)

    @property
    def inner(self) -> Plan:
        """The plan on the narrow rows (see :func:`grpo_cli.engines.narrow.inner_plan`)."""
        return inner_plan(self.plan, self.group, check_hash=not self.exact)


def read_piece(
    piece: Piece, columns: Sequence[str] | None, shuffle: Shuffle
) -> tuple[pl.DataFrame, list[str]]:
    """The rows of ``piece`` (only ``columns`` of them, those present, when given) and,
    with ``columns``, every column name of its file. A piece without ``rows`` is read by
    grpo-adv's reader (its parsing and errors; a CSV file's key columns stay text)."""
    if piece.rows is not None:  # a file the driver found its format scans
        lazy = scan_file(piece.path)
        names = []
        if columns is not None:
            names = lazy.collect_schema().names()
            lazy = lazy.select([c for c in columns if c in names])
        return lazy.slice(piece.offset, piece.rows).collect(), names
    strings = [c for c in shuffle.plan.keys.exact if not c.startswith(PREFIX)]
    frame = read_rewards(Path(piece.path), piece.fmt, string_cols=strings).frame
    names = frame.columns
    if columns is not None:
        frame = frame.select([c for c in columns if c in names])
    return frame, names


def piece_row(piece: Piece, row: int, shuffle: Shuffle) -> dict[str, Any]:
    """The ``row``-th row of ``piece`` (from 0): its key columns (derived ones too) and
    its response id column."""
    from grpo_cli.core.layouts import derived_column

    columns = read_columns(shuffle.plan, shuffle.derived, shuffle.response)
    frame, _ = read_piece(piece, columns, shuffle)
    one = frame.slice(row, 1).with_columns([derived_column(n) for n in shuffle.derived])
    return one.row(0, named=True)


def split_pieces(pieces: Sequence[Piece], shuffle: Shuffle) -> list[Any]:
    """Map: the checked narrow rows of ``pieces``, an Arrow table per partition; then their
    row count and the bytes sent."""
    frames = [_narrow(piece, shuffle) for piece in pieces]
    narrow = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
    tables = _split(narrow, PARTITION, shuffle.partitions)
    return [*tables, (narrow.height, sum(t.nbytes for t in tables))]


def _narrow(piece: Piece, shuffle: Shuffle) -> pl.DataFrame:
    """One piece's narrow rows, with their partition (PARTITION)."""
    from grpo_cli.core.layouts import derived_column

    plan = shuffle.plan
    ids = [] if shuffle.response is None else [shuffle.response]
    frame, names = read_piece(piece, read_columns(plan, shuffle.derived, *ids), shuffle)
    check_added_columns(names, plan.options)  # a column the write would overwrite
    casts = [pl.col(c).cast(t) for c, t in shuffle.casts if c in frame.columns]
    if casts:
        frame = frame.with_columns(casts)
    if shuffle.derived:
        frame = frame.with_columns([derived_column(n) for n in shuffle.derived])
    check_frame(frame, plan.options, plan.estimator)  # this piece's values
    needed = needed_columns(plan.options, frame.columns) + ([shuffle.step] if shuffle.step else [])
    locator = pl.int_range(pl.len(), dtype=pl.Int64) + (piece.index << ROW_BITS)
    keyed = frame.with_columns(hashed_key(plan.keys.exact))
    moved = plan.keys.exact if shuffle.exact else (GROUP, CHECK)
    return keyed.select(
        locator.alias(LOCATOR),
        *dict.fromkeys([*moved, *needed]),
        *[response_hash(c) for c in ids],
        (pl.col(GROUP) % shuffle.partitions).cast(_index_type(shuffle.partitions)).alias(PARTITION),
    )


def _index_type(count: int) -> pl.DataType:
    """The narrowest unsigned type of 0..count-1 (a UInt16 splits a quarter faster)."""
    return pl.UInt16() if count <= 1 << 16 else pl.UInt32()


def _split(frame: pl.DataFrame, by: str, count: int) -> list[pa.Table]:
    """``frame`` split by its column ``by`` (values 0..count-1, dropped) into ``count`` Arrow
    tables, rows in order (an empty table for a value without rows)."""
    split = frame.partition_by(by, as_dict=True, include_key=False, maintain_order=True)
    empty = frame.drop(by).clear().to_arrow()
    return [split[(k,)].to_arrow() if (k,) in split else empty for k in range(count)]


def _partition_rows(tables: Sequence[pa.Table]) -> pl.DataFrame:
    frames = [pl.DataFrame(pl.from_arrow(t)) for t in tables]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()


def partition_batch_partials(shuffle: Shuffle, *tables: pa.Table) -> pl.DataFrame | None:
    """Reduce, first pass of a batch-level formula: one partition's batch partials, or None
    when two of its keys share the group hash."""
    frame = _partition_rows(tables)
    inner = shuffle.inner
    grouped = with_group_stats(frame, inner).collect()
    if hash_collision(grouped, inner.keys):
        return None
    return grouped_partials(grouped, inner)


def compute_partition(
    index: int,
    batch_of: Sequence[int],
    shuffle: Shuffle,
    stats: pl.DataFrame | None,
    groups: str | None,
    *tables: pa.Table,
) -> list[Any]:
    """Reduce: one partition annotated by the Polars engine; the added columns with their
    locators, an Arrow table per write batch (``batch_of[p]``: piece p's); then the run
    partials (None: a hash collision), the bytes sent back, its rows repeating a response
    id and its groups spanning the step column. With ``groups``, its rows of the per-group
    table are written there."""
    import numpy as np

    frame = _partition_rows(tables)
    inner = shuffle.inner
    options = inner.options
    added = shuffle.plan.options.added_columns()
    if stats is not None:
        frame = with_batch_stats(frame, inner, stats)
    computed = inner if stats is None else applied(inner)
    full = POLARS.annotate(frame, span_plan(computed, frame, shuffle.step))
    batches = max(batch_of) + 1
    if hash_collision(full, inner.keys):
        return [None] * batches + [(None, 0, None, None)]
    check_batch_spans(
        full, shuffle.plan.options, shuffle.group, uses_groups=inner.estimator.uses_groups
    )
    if groups is not None:
        from grpo_cli.core.run_summary import group_table

        table = group_table(full.lazy(), inner)
        write_parquet(table, Path(groups) / f"part-{index:05d}.parquet")
    partials = piece_run_partials(full, options, shuffle.group)
    repeats = piece_repeats(full, shuffle.group, LOCATOR) if shuffle.response else None
    step = shuffle.step
    spans = spanning_groups(full, shuffle.group, step, LOCATOR) if step else None
    back = full.select(LOCATOR, *added)
    piece = back.get_column(LOCATOR).to_numpy() // PIECE_STRIDE
    batch = pl.Series(PARTITION, np.asarray(batch_of)[piece], dtype=_index_type(batches))
    out = _split(back.with_columns(batch), PARTITION, batches)
    return [*out, (partials, sum(t.nbytes for t in out), repeats, spans)]


def write_pieces(pieces: Sequence[Piece], folder: str, shuffle: Shuffle, *tables: pa.Table) -> int:
    """Write the part of each of ``pieces`` (``tables``: the added columns of their rows,
    with their locators); their row count."""
    back = _partition_rows(tables)
    by_piece = back.with_columns((pl.col(LOCATOR) // PIECE_STRIDE).alias(PARTITION))
    split = by_piece.partition_by(PARTITION, as_dict=True, include_key=False)
    empty = back.clear()
    return sum(
        _write_piece(piece, folder, shuffle, split.get((piece.index,), empty)) for piece in pieces
    )


def _write_piece(piece: Piece, folder: str, shuffle: Shuffle, back: pl.DataFrame) -> int:
    """Write ``piece``'s part: its columns but the derived keys, with the added columns of
    ``back`` (by locator, in any order) in row order; its row count."""
    import numpy as np

    added = shuffle.plan.options.added_columns()
    frame, _ = read_piece(piece, None, shuffle)
    rows = back.get_column(LOCATOR).to_numpy() % PIECE_STRIDE
    if len(rows) != frame.height or (
        len(rows) and (rows.min() != 0 or rows.max() != frame.height - 1)
    ):
        raise RuntimeError(f"{piece.path}: {len(rows)} computed rows for {frame.height} input rows")
    position = np.empty(len(rows), dtype=np.int64)
    position[rows] = np.arange(len(rows))
    ordered = back.select(added)[position]
    kept = [c for c in frame.columns if c not in shuffle.derived]
    columns = [ordered.get_column(c) if c in added else frame.get_column(c) for c in kept]
    columns += [ordered.get_column(c) for c in added if c not in kept]
    write_parquet(pl.DataFrame(columns), Path(folder) / piece.name)
    return frame.height


PARTIAL_SUFFIX: Final = ".tmp"  # a part being written: .NAME.<owner tag>.tmp beside NAME


def write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """``frame`` to ``path`` (zstd), written beside it as ``.NAME.<owner tag>.tmp`` and
    renamed (a task run again replaces an earlier try's file)."""
    from grpo_cli.io.temporaries import owner_tag

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{owner_tag()}{PARTIAL_SUFFIX}")
    frame.write_parquet(partial, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)
    partial.replace(path)


def remove_partials(folder: Path) -> None:
    """Remove the ``.NAME.<owner tag>.tmp`` files workers that died while writing left in
    ``folder`` (run once every task is done)."""
    for path in folder.rglob(f".*{PARTIAL_SUFFIX}"):
        if path.is_file():
            path.unlink(missing_ok=True)

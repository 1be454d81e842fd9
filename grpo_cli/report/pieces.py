"""A big Parquet log read by the report commands (``summarize``, ``plot``, ``verify``) in
pieces of whole groups, so that their memory is set by PIECE_ROWS, not by the log.

One streaming pass reads only the columns a command needs, with each row's input index
(``ROW``), and spills them (LZ4 Arrow IPC, in a hidden folder beside the log or in
the system's temporary folder) into at most FANOUT parts by a hash of the group key, each
part split again the same way until it holds at most PIECE_ROWS rows (a larger group: one
piece): every group whole in one piece, rows in input order within a piece. Each piece is
then read into memory and handed to the command's own in-memory computation, whose
partial results merge (:mod:`grpo_cli.core.metrics`). A log of at most PIECE_ROWS rows is one
piece, read as a whole: the same code, the same figures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import polars as pl

from grpo_cli.core.columns import PART_INDEX, PART_ROW

PIECE_ROWS: Final = 1_000_000  # rows a piece holds, at most about (peak RSS ~0.6 GB)
FANOUT: Final = 16  # parts one spilling pass writes at most
SPILL_COMPRESSION: Final = "lz4"  # read back in buffers, never mapped (uncompressed: +0.5 GB)
ROW: Final = PART_ROW  # each row's input index (from 0), carried by every piece


def big_log(paths: Sequence[Path], fmt: str | None) -> tuple[Path, int] | None:
    """The one file of ``paths`` and its row count (its footer's) when a format scans it
    (Parquet) and it holds more than PIECE_ROWS rows; else None (several files, standard
    input, a text or compressed file: read into memory as before)."""
    from grpo_cli.io.formats import scanned_format
    from grpo_cli.io.read import check_scanned_file

    if len(paths) != 1:
        return None
    path = paths[0]
    scanned = scanned_format(path)
    if scanned is None or scanned.rows is None or fmt not in (None, scanned.name):
        return None
    rows = check_scanned_file(path)
    return (path, rows) if rows > PIECE_ROWS else None


def read_pieces(
    source: Path, rows: int, columns: Sequence[str], key_cols: Sequence[str]
) -> Iterator[pl.DataFrame]:
    """``columns`` of ``source`` (``rows`` rows) and ``ROW``, in pieces of whole groups of
    ``key_cols`` (about PIECE_ROWS rows each; rows in input order within a piece). The
    spill folder is removed when the iteration ends, by exhaustion or not."""
    from grpo_cli.io.read import scan_file
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    folder = make_spill_folder(spill_parent(source))
    failed = True
    try:
        lazy = scan_file(source).select(list(dict.fromkeys(columns))).with_row_index(ROW)
        yield from _split(lazy, rows, key_cols, folder, 0)
        failed = False
    finally:
        remove_spill_folder(folder, after_error=failed)


def _split(
    rows: pl.LazyFrame, count: int, key_cols: Sequence[str], folder: Path, level: int
) -> Iterator[pl.DataFrame]:
    """``rows`` (``count`` of them) in pieces of at most about PIECE_ROWS rows: whole when
    they fit, else spilled into at most FANOUT parts by a hash of the key (seeded by the
    ``level`` of splitting: parts of a part split again), each part split in turn and its
    files removed once read. A sink's memory grows with the files it writes: FANOUT bounds
    it."""
    if count <= PIECE_ROWS:
        yield rows.collect()
        return
    parts = min(FANOUT, -(-count // PIECE_ROWS))
    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    spilled = rows.with_columns((key.hash(seed=level) % parts).alias(PART_INDEX))
    target = folder / str(level)
    sink = pl.PartitionBy(
        target, key=PART_INDEX, include_key=False, approximate_bytes_per_file=None
    )
    spilled.sink_ipc(sink, compression=SPILL_COMPRESSION, mkdir=True)
    found = sorted(p for p in target.iterdir() if p.is_dir())
    for part in found:
        files = sorted(part.glob("*.ipc"))
        held = pl.scan_ipc(files).select(pl.len()).collect().item()
        if len(found) == 1:  # one key (a group over PIECE_ROWS rows): no smaller piece
            yield pl.scan_ipc(files).collect()
        else:
            yield from _split(pl.scan_ipc(files), held, key_cols, part, level + 1)
        for file in files:
            with contextlib.suppress(OSError):
                file.unlink()

"""A big Parquet log read by the report commands (``summarize``, ``plot``, ``verify``) in
pieces of whole groups, so that their memory is set by PIECE_ROWS, not by the log.

One streaming pass reads only the columns a command needs, with each row's input index
(``ROW``), and spills them (Arrow IPC, lz4: about 19 bytes a row of the benchmark's four
columns, where uncompressed took 46, in a hidden folder beside the log or in
the system's temporary folder) into rows / PIECE_ROWS parts by a hash of the group key, as
the partitioned engine spills its partitions (:func:`grpo_cli.engines.narrow.spill_parts`:
one batch in memory whatever the count of parts). Every group lies whole in one piece (a
group larger than PIECE_ROWS is one piece), rows in input order within a piece. Each piece
is then read into memory and handed to the command's own in-memory computation, whose
partial results merge (:mod:`grpo_cli.core.metrics`). A log of at most PIECE_ROWS rows is one
piece, read as a whole: the same code, the same figures.

A command whose partials are per step (summarize's per-step table) spreads the pieces by a
hash of the step instead (``spread_cols``, columns of the group key): each step then lies
whole in one piece, so that the pieces' per-step partials are disjoint and merge by
concatenation, in time and memory linear in the steps (by the group key, every piece holds
every step, and merging them costs pieces x steps). A part over SPLIT_ROWS rows (one step
too large, or a few) is spilled again by the group key into parts of about PIECE_ROWS rows:
memory stays set by PIECE_ROWS, and only that step's partials overlap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import polars as pl

from grpo_cli.core.columns import PART_INDEX, PART_ROW

PIECE_ROWS: Final = 1_000_000  # rows a piece holds, about (peak RSS ~0.6 GB)
SPILL_BATCH_ROWS: Final = 500_000  # rows the spilling pass reads at a time
SPLIT_ROWS: Final = 2 * PIECE_ROWS  # a part spread by spread_cols is split above this
SPILL_COMPRESSION: Final = "lz4"  # 2.3x less disk on a 200M-row log (8.6 GiB to 3.7), +26% time
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
    source: Path,
    rows: int,
    columns: Sequence[str],
    key_cols: Sequence[str],
    spread_cols: Sequence[str] | None = None,
    *,
    split: bool = True,
) -> Iterator[pl.DataFrame]:
    """``columns`` of ``source`` (``rows`` rows) and ``ROW``, in pieces of whole groups of
    ``key_cols`` (about PIECE_ROWS rows each; rows in input order within a piece), each
    value of ``spread_cols`` (some of ``key_cols``) whole in one piece where it holds at
    most SPLIT_ROWS rows, or always with ``split=False`` (a batch that a formula reads
    whole: memory then set by the largest). The spill folder is removed when the iteration ends, by
    exhaustion or not. Two stages are reported to :mod:`grpo_cli.core.progress`: the
    spilling pass's rows, then the rows of the pieces the caller is done with."""
    from grpo_cli.core import progress
    from grpo_cli.engines.narrow import spill_parts
    from grpo_cli.io.read import scan_file
    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder, spill_parent

    lazy = scan_file(source).select(list(dict.fromkeys(columns))).with_row_index(ROW)
    parts = -(-rows // PIECE_ROWS)
    if parts <= 1:
        yield lazy.collect()
        return
    folder = make_spill_folder(spill_parent(source))
    failed = True
    try:
        progress.stage("spilling the log in pieces", rows)
        spilled = _parted(lazy, spread_cols or key_cols, parts)
        spill_parts(spilled, folder / "parts", SPILL_BATCH_ROWS, compression=SPILL_COMPRESSION)
        progress.stage("reading the pieces", rows)
        for path in sorted((folder / "parts").glob("*.arrow")):
            big = split and spread_cols
            if big and pl.scan_ipc(path).select(pl.len()).collect().item() > SPLIT_ROWS:
                pieces = _split(path, key_cols, folder / f"split-{path.stem}")
            else:
                pieces = iter([pl.read_ipc(path)])
                path.unlink()
            for piece in pieces:
                yield piece
                progress.advance(piece.height)
        failed = False
    finally:
        remove_spill_folder(folder, after_error=failed)


def _parted(rows: pl.LazyFrame, cols: Sequence[str], parts: int) -> pl.LazyFrame:
    """``rows`` with PART_INDEX: a hash of ``cols`` modulo ``parts``."""
    from grpo_cli.engines.narrow import hashed_key

    return rows.with_columns((hashed_key(cols)[0] % parts).alias(PART_INDEX))


def _split(path: Path, key_cols: Sequence[str], folder: Path) -> Iterator[pl.DataFrame]:
    """The part at ``path`` (removed) in pieces of whole groups of ``key_cols``, about
    PIECE_ROWS rows each, rows in input order within each."""
    from grpo_cli.engines.narrow import spill_parts

    rows = pl.scan_ipc(path).select(pl.len()).collect().item()
    parted = _parted(pl.scan_ipc(path), key_cols, -(-rows // PIECE_ROWS))
    spill_parts(parted, folder, SPILL_BATCH_ROWS, compression=SPILL_COMPRESSION)
    path.unlink()
    for part in sorted(folder.glob("*.arrow")):
        piece = pl.read_ipc(part)
        part.unlink()
        yield piece

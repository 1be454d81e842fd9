"""Reading reward logs: one file, standard input or several files, into one frame.

Compressed inputs (from files or standard input) are decompressed first (see
:mod:`grpo_cli.io.formats`). CSV's delimiter is a comma unless the header line has none and
has semicolons, tabs or pipes; key columns are read as text, then given back the number type
when every value reads back as the very same text (:func:`typed_keys`). A reward column of
numbers written as text is read as numbers when every value parses (see
:mod:`grpo_cli.jobs.compute`). Parquet files are checked through their footer when Polars
fails on them, so that a damaged file is an input error naming it (exit 3), never a crash.
Several inputs (files, folders, globs) are read in natural order and concatenated, with the
file each row came from.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import polars as pl

from grpo_cli.core.errors import (
    InputError,
    Message,
    OptionsError,
    option,
)
from grpo_cli.io.formats import (
    DATA_FORMATS,
    PARQUET_MAGIC,
    SNIFF_BYTES,
    STDIN_NAME,
    decompress,
    error_line,
    format_from_suffix,
    sniff_format,
)

CSV_SEPARATORS: Final = (";", "\t", "|")


@dataclass(frozen=True)
class RewardLog:
    """A reward log read into memory, with the format it was read as."""

    frame: pl.DataFrame
    format: str
    source: str


def read_rewards(
    source: str | Path | BinaryIO,
    fmt: str | None = None,
    *,
    string_cols: Iterable[str] = (),
) -> RewardLog:
    """Read a whole reward log into memory.

    Args:
        source: a path, ``"-"`` for standard input, or an open binary stream.
        fmt: force a format instead of detecting it.
        string_cols: columns CSV must read as text (group keys: ``"007"`` stays ``"007"``).

    Raises:
        InputError: missing, unreadable, empty or malformed input.
    """
    if isinstance(source, str) and source == "-":
        import sys

        source = sys.stdin.buffer
    if isinstance(source, str | Path):
        path = Path(source)
        data = _read_file_bytes(path)
        name = str(path)
        if fmt is None:
            fmt = format_from_suffix(path)
            if fmt == "markdown":
                raise InputError(
                    f"{name} is a Markdown file, not a reward log",
                    hint="give a Parquet, CSV or JSONL file",
                )
    else:
        data = source.read()
        name = STDIN_NAME
    data = decompress(data, name)
    if not data.strip():
        raise InputError(
            f"{name} is empty",
            hint="give a reward log with a header or JSON objects and at least one row",
        )
    if fmt is None:
        fmt = sniff_format(data[:SNIFF_BYTES])
    frame = _parse(data, fmt, name, list(string_cols))
    if frame.height == 0:
        raise no_rows(name, frame.columns)
    return RewardLog(frame=frame, format=fmt, source=name)


def no_rows(name: str, columns: Sequence[str]) -> InputError:
    """The error for a reward log with a header (or a schema) and no rows."""
    return InputError(
        f"{name} has no rows (columns: {', '.join(columns) or 'none'})",
        hint="give a reward log with at least one row",
    )


def _read_file_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(
            f"no such file: {path}", hint="check the path, or give - to read standard input"
        ) from None
    except IsADirectoryError:
        raise InputError(
            f"{path} is a directory, not a file", hint="give the path of one reward log file"
        ) from None
    except PermissionError:
        raise InputError(
            f"permission denied reading {path}", hint="check the file's permissions"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def truncated_parquet(name: str) -> InputError:
    """The error for a Parquet file without its footer."""
    return InputError(
        f"{name} is not a complete Parquet file (no PAR1 footer: truncated?)",
        hint="write the file again, or pass " + option("input_format") + " if it is not Parquet",
    )


def scan_parquet_file(path: Path | str) -> pl.LazyFrame:
    """The Parquet file ``path``, lazily. The path is the file's name, never a pattern:
    Polars' scans expand ``[``, ``*`` and ``?`` by default, and ``shard[1].parquet`` then
    matched no file (an internal error). Every scan of a named Parquet file goes
    through here."""
    return pl.scan_parquet(path, glob=False)


def check_parquet_file(path: Path) -> int:
    """For the engines that read a Parquet file themselves (``--low-memory``, ``--backend
    ray``): raise unless ``path`` starts (OptionsError) and ends (InputError: truncated)
    like a Parquet file, and its footer describes data that lies inside the file
    (:func:`check_parquet_layout`), reading the footer only. Returns its row count."""
    if not is_parquet(path):
        low_memory = option("backend", "partitioned", alias="alone")
        raise OptionsError(
            low_memory + f" needs a Parquet input; {path} is not Parquet",
            hint='convert it to Parquet first (python -c "import polars as pl; '
            "pl.scan_csv('IN.csv').sink_parquet('IN.parquet')\"), or drop " + low_memory,
            path=path,
        )
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - 4, 0))
        tail = handle.read(4)
    if tail != PARQUET_MAGIC or size < 12:
        raise truncated_parquet(str(path))
    return check_parquet_layout(path, str(path), PARQUET_DAMAGED_HINT)


def is_parquet(path: Path) -> bool:
    """Whether the file ``path`` starts as a Parquet file does (not empty, compressed or
    another format)."""
    with path.open("rb") as handle:
        return handle.read(4) == PARQUET_MAGIC


OUTPUT: Final = option("output", short=True)
"""The output option (``-o`` on the command line) named in messages."""
FORCE: Final = option("force", True)
"""Overwriting allowed (``force=True``), named in messages."""

PARQUET_HINT: Final = (
    "the file may be truncated or not Parquet; pass "
    + option("input_format")
    + " to read it as another"
)
PARQUET_DAMAGED_HINT: Final = "the file is truncated or damaged: write it again"


def unreadable_parquet(name: str, cause: str, hint: Message = PARQUET_HINT) -> InputError:
    """The error for a Parquet file that cannot be read: the file named, the cause's first
    line in plain text (terminal colour codes removed)."""
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", cause)
    return InputError(f"cannot read {name} as parquet: {error_line(plain)}", hint=hint)


def check_parquet_layout(source: Path | bytes, name: str, hint: Message = PARQUET_HINT) -> int:
    """Raise an InputError unless the Parquet footer of ``source`` (a path, or the file's
    bytes) can be read and every column chunk it lists lies inside the file, before the
    footer; return the row count the footer gives. A file cut in the middle with its
    footer re-appended passes the magic-byte checks, and Polars' readers panic on it
    instead of reporting an error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if isinstance(source, bytes):
            size = len(source)
            footer = int.from_bytes(source[-8:-4], "little")
            meta = pq.read_metadata(pa.BufferReader(source))
        else:
            size = source.stat().st_size
            with source.open("rb") as handle:
                handle.seek(size - 8)
                footer = int.from_bytes(handle.read(4), "little")
            meta = pq.read_metadata(source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise unreadable_parquet(name, str(exc), hint) from None
    end = size - 8 - footer
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            starts = [chunk.data_page_offset]
            if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                starts.append(chunk.dictionary_page_offset)
            start = min(starts)
            if start < 4 or start + chunk.total_compressed_size > end:
                raise unreadable_parquet(
                    name,
                    f"row group {group}, column {chunk.path_in_schema}: its data lies outside "
                    f"the file (bytes {start}..{start + chunk.total_compressed_size} of {size}); "
                    "the file is truncated or corrupt",
                    hint,
                )
    return int(meta.num_rows)


def csv_separator(data: bytes) -> str:
    """A comma, unless the header line has none and has one of CSV_SEPARATORS."""
    header = data.split(b"\n", 1)[0]
    if b"," in header:
        return ","
    counts = {sep: header.count(sep.encode()) for sep in CSV_SEPARATORS}
    best = max(counts, key=lambda sep: counts[sep])
    return best if counts[best] else ","


def _parse(data: bytes, fmt: str, name: str, string_cols: list[str]) -> pl.DataFrame:
    import io

    buffer = io.BytesIO(data)
    if fmt == "parquet" and not data.endswith(PARQUET_MAGIC):
        raise truncated_parquet(name)
    try:
        if fmt == "parquet":
            try:
                return pl.read_parquet(buffer)
            except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError):
                # Only a file Polars failed on pays for the footer check (pyarrow's import
                # is 0.1 s): a damaged one gets its own message; Polars panics on some.
                check_parquet_layout(data, name)
                raise
        if fmt == "csv":
            overrides: dict[str, pl.DataType] = {col: pl.String() for col in string_cols}
            frame = pl.read_csv(
                buffer,
                schema_overrides=overrides,
                infer_schema_length=None,
                separator=csv_separator(data),
            )
            _check_unique_header(frame, name)
            return typed_keys(frame, string_cols)
        if fmt == "jsonl":
            try:
                return pl.read_ndjson(buffer, infer_schema_length=None)
            except pl.exceptions.PolarsError:
                cleaned = _nan_as_null(data)
                if cleaned is None:
                    raise
                try:
                    return pl.read_ndjson(io.BytesIO(cleaned), infer_schema_length=None)
                except pl.exceptions.PolarsError as exc:  # another line: blame it, not a NaN
                    raise _parse_error(cleaned, fmt, name, exc) from None
        if fmt == "json":
            return pl.read_json(buffer, infer_schema_length=None)
    except pl.exceptions.PolarsError as exc:
        raise _parse_error(data, fmt, name, exc) from None
    raise OptionsError(f"unknown format {fmt!r}", hint=f"choose one of: {', '.join(DATA_FORMATS)}")


def typed_keys(frame: pl.DataFrame, string_cols: Iterable[str]) -> pl.DataFrame:
    """CSV key columns read as text, given back the number type they read as when every
    value reads back as the very same text: ``7`` is the integer 7, but a column with
    ``007`` (or ``7.50``, `` 7``) stays text, so two keys that differ as text never merge.
    Keys are compared exactly, and a column of plain numbers (a ``step``) keeps its type:
    it is written back as a number and sorts as one."""
    typed = []
    for column in string_cols:
        if column not in frame.columns or frame.schema[column] != pl.String:
            continue
        text = frame.get_column(column)
        for dtype in (pl.Int64, pl.Float64):
            number = text.cast(dtype, strict=False)
            if number.cast(pl.String).eq_missing(text).all():
                typed.append(number)
                break
    return frame.with_columns(typed) if typed else frame


def _check_unique_header(frame: pl.DataFrame, name: str) -> None:
    """Polars renames a repeated CSV column ``c`` to ``c_duplicated_0``: refuse instead."""
    import re

    for column in frame.columns:
        match = re.fullmatch(r"(.+)_duplicated_\d+", column)
        if match and match.group(1) in frame.columns:
            raise InputError(
                f"{name} has more than one column named {match.group(1)!r}",
                hint="rename the columns so that every name is unique",
            )


def _parse_error(data: bytes, fmt: str, name: str, exc: Exception) -> InputError:
    detail = error_line(str(exc))
    if fmt in ("csv", "jsonl", "json"):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            return InputError(
                f"{name} is not UTF-8 text (byte 0x{data[bad.start]:02x} at offset {bad.start})",
                hint="CSV and JSONL logs are UTF-8 text; for Parquet, name the file .parquet "
                "or pass " + option("input_format", "parquet"),
            )
    if fmt == "jsonl":
        located = _locate_bad_json_line(data)
        if located is not None:
            line_no, problem = located
            hint = 'each line must be one JSON object, e.g. {"prompt_id": "p1", "reward": 1.0}'
            if problem.endswith("is not JSON"):
                hint = "write null for a missing reward, or a finite number"
            return InputError(f"{name} line {line_no}: {problem}", hint=hint)
    hints: dict[str, Message] = {
        "parquet": PARQUET_HINT,
        "csv": "check the delimiter and quoting; pass "
        + option("input_format")
        + " to read it as another format",
        "jsonl": "each line must be one JSON object",
        "json": "a .json file must hold one array of objects, or one object per line",
    }
    return InputError(f"cannot read {name} as {fmt}: {detail}", hint=hints[fmt])


def _locate_bad_json_line(data: bytes) -> tuple[int, str] | None:
    """Find the first line of a JSONL payload that is not one JSON object (error path only)."""
    for line_no, raw in enumerate(data.splitlines(), start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except _NotJson as exc:
            return line_no, str(exc)
        except RecursionError:
            return line_no, "JSON nested too deeply to read"
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
            return line_no, f"malformed JSON ({reason})"
        if not isinstance(value, dict):
            return line_no, f"expected a JSON object, got {type(value).__name__}"
    return None


def _nan_as_null(data: bytes) -> bytes | None:
    """JSONL with Python's ``NaN`` literal (``json.dumps(float("nan"))``) rewritten with
    ``null`` in its place, as CSV and Parquet NaN rewards are read as null; None when no line
    holds the literal. Only lines that mention ``NaN`` are parsed (with Python's json module,
    so a ``"NaN"`` inside a string is left alone); ``Infinity`` stays refused."""
    if b"NaN" not in data:
        return None
    lines = data.splitlines(keepends=True)
    changed = False
    for i, raw in enumerate(lines):
        if b"NaN" not in raw:
            continue
        try:
            value = json.loads(raw, parse_constant=_nan_only)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None  # another problem: reported by the usual error path
        lines[i] = json.dumps(value, ensure_ascii=False).encode() + b"\n"
        changed = True
    return b"".join(lines) if changed else None


def _nan_only(literal: str) -> None:
    if literal != "NaN":
        raise _NotJson(f"{literal} is not JSON")


class _NotJson(ValueError):
    """A literal Python's json module accepts but JSON (and Polars) does not."""


def _reject_constant(literal: str) -> float:
    raise _NotJson(f"{literal} is not JSON")


# --------------------------------------------------------------------------- several files


def _natural_key(path: Path) -> tuple[tuple[int, int | str], ...]:
    """Sort ``2.jsonl`` before ``10.jsonl``: digit runs compare as numbers."""
    import re

    parts = re.split(r"(\d+)", path.name)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def expand_sources(sources: Sequence[str]) -> list[Path]:
    """Paths of every input: a folder gives its reward-log files (by suffix), a glob its
    matches, both in natural order (step 2 before step 10)."""
    import glob

    paths: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(
                (
                    p
                    for p in path.iterdir()
                    if p.is_file() and format_from_suffix(p) in DATA_FORMATS
                ),
                key=_natural_key,
            )
            if not found:
                raise InputError(
                    f"folder {path} holds no .parquet, .csv, .jsonl or .ndjson file",
                    hint="give the files themselves, or a glob such as 'dumps/*.jsonl'",
                )
            paths.extend(found)
        elif any(ch in source for ch in "*?[") and not path.exists():
            matches = sorted(
                map(Path, glob.glob(source, recursive=True)),  # noqa: PTH207
                key=_natural_key,
            )  # "**" matches folders at any depth (a Ray OUT_DIR of several folders)
            files = [m for m in matches if not m.is_dir()]  # 'runs/**' matches folders too
            if not files:
                raise InputError(
                    f"no file matches {source}" + (" (only folders do)" if matches else ""),
                    hint=f"match the files in them, such as '{source.rstrip('/')}/*.parquet'"
                    if matches
                    else "check the pattern",
                )
            paths.extend(files)
        else:
            paths.append(path)
    _refuse_repeats(paths)
    return paths


def _refuse_repeats(paths: Sequence[Path]) -> None:
    """Refuse an input that appears twice after expanding folders and globs (``1.jsonl
    1.jsonl``, overlapping globs, a link to a file also given): its rows would count twice."""
    seen: dict[tuple[int, int] | Path, Path] = {}
    for path in paths:
        try:
            info = path.stat()
            identity: tuple[int, int] | Path = (info.st_dev, info.st_ino)
        except OSError:
            identity = path.absolute()
        if identity in seen:
            first = seen[identity]
            shown = str(path) if str(path) == str(first) else f"{first} and {path}"
            raise OptionsError(
                f"the input {shown} is given twice: its rows would count twice",
                hint="give each file once (check overlapping globs and folders)",
            )
        seen[identity] = path


def read_many(
    sources: Sequence[str],
    fmt: str | None = None,
    *,
    string_cols: Iterable[str] = (),
    source_col: str | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> RewardLog:
    """Read one or several inputs (files, folders, globs) as one log, rows in file order.

    Columns missing from some files are null there; numeric types are widened to agree.
    ``source_col`` adds each row's input index (0, 1, ...); ``on_file`` is called after
    each file is read (progress).
    """
    if list(sources) == ["-"]:
        return read_rewards("-", fmt, string_cols=string_cols)
    if "-" in sources:
        raise OptionsError(
            "standard input (-) cannot be combined with files", hint="give either - or files"
        )
    paths = expand_sources(sources)
    logs = []
    for index, path in enumerate(paths):
        log = read_rewards(path, fmt, string_cols=string_cols)
        if source_col is not None:
            column = pl.lit(index, dtype=pl.UInt32).alias(source_col)
            log = RewardLog(log.frame.with_columns(column), log.format, log.source)
        logs.append(log)
        if on_file is not None:
            on_file(path)
    if len(logs) == 1:
        return logs[0]
    try:
        frame = pl.concat([log.frame for log in logs], how="diagonal_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise InputError(
            f"cannot combine the {len(paths)} inputs into one log: {error_line(str(exc))}",
            hint="the files must share their column types",
        ) from None
    formats = {log.format for log in logs}
    shown = f"{len(paths)} files ({paths[0]} ... {paths[-1]})"
    return RewardLog(
        frame=frame, format=formats.pop() if len(formats) == 1 else "parquet", source=shown
    )

"""Reading reward logs: one file, standard input or several files (folders and globs, in
natural order), into one frame; compressed inputs are decompressed first.

An input that is not a log is refused in bounded memory and time: a device at once; a pipe
whose first bytes are not its format's at those bytes; a first line longer than
FIRST_LINE_LIMITS before it is parsed. A Parquet footer is checked before Polars reads it
(:func:`check_parquet_layout`): a damaged file is an input error, never Rust's panic.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Final

import polars as pl

from grpo_cli.core.errors import (
    InputError,
    Message,
    OptionsError,
    option,
)
from grpo_cli.io.formats import (
    DATA_FORMATS,
    FORMATS,
    SNIFF_BYTES,
    STDIN_NAME,
    cannot_read,
    check_magic,
    compression_of,
    decompress,
    describe,
    error_line,
    format_from_suffix,
    normalize_format,
    scanned_format,
    sniff_format,
)

PARQUET_MAGIC: Final = b"PAR1"

CSV_SEPARATORS: Final = (";", "\t", "|")
FIRST_LINE_LIMITS: Final = {"csv": 1 << 20, "jsonl": 64 << 20}
"""The longest first line of a CSV log (its header: 1 MiB is some 100,000 names) and of a
JSONL log (one response's object, token lists and all)."""
_TEXT: Final = [name for name in DATA_FORMATS if not FORMATS[name].binary]
_BINARY: Final = [name for name in DATA_FORMATS if FORMATS[name].binary]
TEXT_HINT: Final = (
    f"{describe(_TEXT, last='and')} logs are UTF-8 text; for {describe(_BINARY)}, name the "
    f"file {' or '.join(FORMATS[name].suffixes[0] for name in _BINARY)} or pass "
    + option("input_format")
    + f" {describe(_BINARY)}"
)


@dataclass(frozen=True)
class RewardLog:
    """A reward log read into memory, the format it was read as, and one-line warnings."""

    frame: pl.DataFrame
    format: str
    source: str
    warnings: tuple[str, ...] = ()


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
    if fmt is not None:
        fmt = normalize_format(fmt)
    if isinstance(source, str) and source == "-":
        import sys

        source = sys.stdin.buffer
    if isinstance(source, str | Path):
        path = Path(source)
        name = str(path)
        if fmt is None:
            fmt = format_from_suffix(path)
            if fmt is not None and not FORMATS[fmt].data:
                raise InputError(
                    f"{name} is a {fmt} file, not a reward log",
                    hint=f"give a {describe(DATA_FORMATS)} file",
                )
        data = _read_file_bytes(path, fmt)
    else:
        name = STDIN_NAME
        data = _read_stream(source, name, fmt)
    data = decompress(data, name)
    if not data or data.isspace():  # (strip would copy the whole log)
        raise empty_input(name)
    if fmt is None:
        fmt = sniff_format(data[:SNIFF_BYTES])
    _check_first_line(data, fmt, name)
    read = FORMATS[fmt].read
    assert read is not None  # a data format (checked above, or sniffed)
    try:
        frame, warnings = read(data, name, list(string_cols))
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        raise parse_error(data, fmt, name, exc) from None
    if frame.height == 0:
        raise no_rows(name, frame.columns)
    return RewardLog(frame=frame, format=fmt, source=name, warnings=warnings)


def no_rows(name: str, columns: Sequence[str]) -> InputError:
    """The error for a reward log with a header (or a schema) and no rows."""
    return InputError(
        f"{name} has no rows (columns: {', '.join(columns) or 'none'})",
        hint="give a reward log with at least one row",
    )


def _read_file_bytes(path: Path, fmt: str | None) -> bytes:
    """The bytes of the file or pipe ``path``; an InputError when it cannot be read."""
    try:
        if not _is_pipe(path):
            return path.read_bytes()
        with path.open("rb") as handle:
            return _read_stream(handle, str(path), fmt)
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: OSError) -> InputError:
    """The error for a path that cannot be read (``exc``: why)."""
    if isinstance(exc, FileNotFoundError):
        return InputError(
            f"no such file: {path}", hint="check the path, or give - to read standard input"
        )
    if isinstance(exc, IsADirectoryError):
        return InputError(
            f"{path} is a directory, not a file", hint="give the path of one reward log file"
        )
    if isinstance(exc, PermissionError):
        return InputError(f"permission denied reading {path}", hint="check the file's permissions")
    return InputError(f"cannot read {path}: {exc.strerror or exc}")


def _is_pipe(path: Path) -> bool:
    """Whether ``path`` is a pipe (``<(cmd)``) rather than a regular file. Raises
    FileNotFoundError, IsADirectoryError, and an InputError for a device or a socket."""
    mode = path.stat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return stat.S_ISFIFO(mode)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(path)
    raise _not_a_file(str(path), mode)


def _not_a_file(name: str, mode: int) -> InputError:
    """The error for an input that is a device or a socket (``mode``: its ``st_mode``)."""
    kind = "character device" if stat.S_ISCHR(mode) else "block device"
    kind = "socket" if stat.S_ISSOCK(mode) else kind
    return InputError(
        f"{name} is a {kind}, not a file or a pipe",
        hint="give a reward log file, or pipe one in: cat log.jsonl | grpo-adv compute -",
    )


def require_file(path: Path, engine: Message) -> None:
    """For the engines that open an input more than once: the InputError of
    :func:`read_rewards` for a path that is no file, an OptionsError for a pipe."""
    try:
        pipe = _is_pipe(path)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if pipe:
        raise OptionsError(
            engine + f" reads a file it can open again and seek; {path} is a pipe",
            hint="drop " + engine + ": the default engine reads a pipe (or - for standard input)",
            path=path,
        )


def _read_stream(stream: BinaryIO, name: str, fmt: str | None) -> bytes:
    """The bytes of standard input or a pipe (format ``fmt``, or None: sniffed), read in
    bounded memory until they look like a reward log (see the module docstring); a
    compressed stream or a regular file (``- < log.csv``) is read whole."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no file descriptor (io.BytesIO): as a pipe
        mode = stat.S_IFIFO
    if stat.S_ISREG(mode):
        return stream.read()
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise _not_a_file(name, mode)
    head = stream.read(SNIFF_BYTES)
    if compression_of(head) is not None:
        return head + stream.read()
    fmt = fmt or sniff_format(head)
    check_magic(head, fmt, name)
    if not FORMATS[fmt].binary and b"\0" in head:
        raise InputError(
            f"{name} is not a text log (a NUL byte at offset {head.index(0)})", hint=TEXT_HINT
        )
    parts = [head]
    limit = FIRST_LINE_LIMITS.get(fmt)
    if limit is not None and b"\n" not in head:
        parts.append(stream.readline(limit + 1 - len(head)))
        _check_first_line(b"".join(parts), fmt, name)
    parts.append(stream.read())
    return b"".join(parts)


def _check_first_line(data: bytes, fmt: str, name: str) -> None:
    """Refuse a CSV or JSONL log whose first line is longer than FIRST_LINE_LIMITS."""
    limit = FIRST_LINE_LIMITS.get(fmt)
    if limit is None or len(data) <= limit or data.find(b"\n", 0, limit + 1) >= 0:
        return
    what = "the header line of a CSV log" if fmt == "csv" else "the first line of a JSONL log"
    raise InputError(
        f"{name} is not a reward log: {what} is longer than {limit >> 20} MiB",
        hint="a CSV log's first line names its columns; a JSONL log holds one JSON object per line",
    )


def empty_input(name: str) -> InputError:
    """The error for an input with nothing in it (or only blanks)."""
    return InputError(
        f"{name} is empty",
        hint="give a reward log with a header or JSON objects and at least one row",
    )


def not_parquet(name: str, head: bytes) -> InputError:
    """The error for a file read as Parquet whose first bytes (``head``) are not PAR1: CSV
    or JSON text is named as such, with the format option that reads it."""
    try:
        text = head.decode()
    except UnicodeDecodeError as bad:  # text cut inside a character is still text
        text = head[: bad.start].decode() if bad.reason == "unexpected end of data" else ""
    if not text.strip() or "\x00" in text:
        return InputError(
            f"{name} is not Parquet (it does not start with PAR1)",
            hint="write it again as Parquet, or pass " + option("input_format") + " if it is "
            "another format",
        )
    fmt = sniff_format(head)
    return InputError(
        f"{name} is not Parquet (it looks like {'CSV' if fmt == 'csv' else 'JSON'} text)",
        hint="give " + option("input_format", fmt) + " or rename it",
    )


def scan_file(path: Path | str) -> pl.LazyFrame:
    """The file ``path`` lazily, by the format its first bytes name (see
    :func:`check_scanned_file`)."""
    fmt = scanned_format(Path(path))
    if fmt is None or fmt.scan is None:
        raise InputError(f"{path} changed while it was read", hint="run again")
    return fmt.scan(Path(path))


def scan_parquet_file(path: Path | str) -> pl.LazyFrame:
    """The Parquet file ``path``, lazily, its name never a pattern (``shard[1].parquet``)."""
    return pl.scan_parquet(path, glob=False)


PARQUET_DAMAGED_HINT: Final = "the file is truncated or damaged: write it again"


def check_scanned_file(path: Path, hint: Message | None = PARQUET_DAMAGED_HINT) -> int:
    """Raise unless ``path`` is a file a format scans (OptionsError) and passes that
    format's check (InputError, with ``hint`` for a damaged file; None: the format's own,
    the Polars engine's); return its row count (from the footer)."""
    fmt = scanned_format(path)
    if fmt is None or fmt.rows is None:
        low_memory = option("backend", "partitioned", alias="alone")
        scanned = describe([f.name for f in FORMATS.values() if f.rows is not None])
        raise OptionsError(
            low_memory + f" needs a {scanned} input; {path} is not one it can scan (compressed, "
            "text or a stream?)",
            hint='convert it to Parquet first (python -c "import polars as pl; '
            "pl.scan_csv('IN.csv').sink_parquet('IN.parquet')\"), or drop " + low_memory,
            path=path,
        )
    return fmt.rows(path, str(path), hint)


OUTPUT: Final = option("output", short=True)
"""The output option (``-o`` on the command line) named in messages."""
FORCE: Final = option("force", True)
"""Overwriting allowed (``force=True``), named in messages."""


def check_parquet_layout(source: Path | bytes, name: str, hint: Message | None = None) -> int:
    """Raise an InputError unless ``source`` (a path, or the file's bytes) is not empty,
    starts with PAR1, ends with a readable Parquet footer whose column chunks all lie
    before it and whose columns have distinct names; return the footer's row count. Every
    Parquet reader checks it first (footer only; pyarrow's import takes 0.2 s): Polars
    panics on a cut file with its footer re-appended."""
    if isinstance(source, bytes):
        head = source[:SNIFF_BYTES]
    else:
        with source.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    if not head.strip():
        raise empty_input(name)
    if not head.startswith(PARQUET_MAGIC):
        raise not_parquet(name, head)
    if isinstance(source, bytes):
        size, tail = len(source), source[-8:]
        footer = int.from_bytes(tail[:4], "little")
        meta = source[max(size - 8 - footer, 0) : size - 8]
    else:
        with source.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - 8, 0))
            tail = handle.read(8)
            footer = int.from_bytes(tail[:4], "little")
            handle.seek(max(size - 8 - footer, 0))
            meta = handle.read(min(footer, max(size - 8, 0)))
    if size < 12 or tail[4:] != PARQUET_MAGIC:
        raise InputError(
            f"{name} is not a complete Parquet file (no PAR1 footer: truncated?)",
            hint="write the file again, or pass "
            + option("input_format")
            + " if it is not Parquet",
        )
    end = size - 8 - footer
    try:
        if end < 4:
            raise ValueError(f"a footer of {footer} bytes in a file of {size}")
        fields, _ = _thrift(meta, 0, _STRUCT)
        groups, columns = fields.get(4, []), _top_level_names(fields[2])
    except (IndexError, KeyError, TypeError, ValueError, RecursionError, struct.error):
        raise cannot_read(name, "parquet", "its footer is not Parquet metadata", hint) from None
    for group, row_group in enumerate(groups):
        for chunk in row_group.get(1, []):
            info = chunk.get(3, {})
            start = min(info.get(9, 0), info.get(11) or info.get(9, 0))
            stop = start + info.get(7, 0)
            if start < 4 or stop > end:
                column = ".".join(part.decode(errors="replace") for part in info.get(3, []))
                raise cannot_read(
                    name,
                    "parquet",
                    f"row group {group}, column {column}: its data lies outside the file "
                    f"(bytes {start}..{stop} of {size}); the file is truncated or corrupt",
                    hint,
                )
    seen: set[str] = set()
    for column in columns:
        if column in seen:
            raise duplicate_column(name, column)
        seen.add(column)
    rows = int(fields.get(3, 0))
    if rows > max_rows():
        raise too_many_rows(name, rows)
    return rows


def max_rows() -> int:
    """The most rows one file may hold for the Polars build installed: its row index is
    32-bit (4,294,967,295) unless Polars' 64-bit runtime (``polars[rt64]``) is there."""
    return 2**32 - 1 if pl.get_index_type() == pl.UInt32 else 2**64 - 1


def too_many_rows(name: str, rows: int) -> InputError:
    """The error for a log of more rows than :func:`max_rows` (Polars' own error would
    come later, as an unreadable file)."""
    return InputError(
        f"{name} has {rows:,} rows, more than the {max_rows():,} that Polars' 32-bit "
        "runtime can index",
        hint="install Polars' 64-bit runtime beside grpo-adv: pip install 'polars[rt64]'",
    )


_STRUCT: Final = 12


def _thrift(data: bytes, pos: int, kind: int) -> tuple[Any, int]:
    """One value of type ``kind`` in Thrift's compact protocol (a Parquet footer) at
    ``pos``, and the position after it: a struct as a dict by field id, a list or set as a
    list, a map as a list of pairs, a string as bytes. Malformed data raises IndexError or
    ValueError."""
    if kind in (1, 2, 3):  # a boolean in a list, or a byte
        return data[pos], pos + 1
    if kind in (4, 5, 6):  # integers: zigzag varints
        raw, pos = _varint(data, pos)
        return raw >> 1 ^ -(raw & 1), pos
    if kind == 7:
        return struct.unpack_from("<d", data, pos)[0], pos + 8
    if kind == 8:
        size, pos = _varint(data, pos)
        return data[pos : pos + size], pos + size
    if kind in (9, 10):
        head, pos = data[pos], pos + 1
        size = head >> 4
        if size == 15:
            size, pos = _varint(data, pos)
        items = []
        for _ in range(size):
            item, pos = _thrift(data, pos, head & 15)
            items.append(item)
        return items, pos
    if kind == 11:
        size, pos = _varint(data, pos)
        if not size:
            return [], pos
        types, pos = data[pos], pos + 1
        pairs = []
        for _ in range(size):
            key, pos = _thrift(data, pos, types >> 4)
            value, pos = _thrift(data, pos, types & 15)
            pairs.append((key, value))
        return pairs, pos
    if kind == _STRUCT:
        fields: dict[int, Any] = {}
        field = 0
        while data[pos]:
            head, pos = data[pos], pos + 1
            if head >> 4:
                field += head >> 4
            else:
                field, pos = _thrift(data, pos, 4)
            if head & 15 in (1, 2):  # a boolean field: its value is its type
                fields[field] = head & 15 == 1
            else:
                fields[field], pos = _thrift(data, pos, head & 15)
        return fields, pos + 1
    raise ValueError(f"unknown Thrift type {kind}")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while data[pos] & 0x80:
        value |= (data[pos] & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
    return value | data[pos] << shift, pos + 1


def _top_level_names(schema: list[dict[int, Any]]) -> list[str]:
    """The top-level column names of a Parquet schema (its elements depth first: name 4,
    number of children 5; the first is the root)."""
    names, index = [], 1
    for _ in range(schema[0].get(5, 0)):
        names.append(schema[index][4].decode(errors="replace"))
        pending, index = schema[index].get(5, 0), index + 1
        while pending:  # skip the column's nested fields
            pending, index = pending - 1 + schema[index].get(5, 0), index + 1
    return names


def csv_separator(data: bytes) -> str:
    """A comma, unless the header line has none and has one of CSV_SEPARATORS."""
    header = data.split(b"\n", 1)[0]
    if b"," in header:
        return ","
    best = max(CSV_SEPARATORS, key=lambda sep: header.count(sep.encode()))
    return best if best.encode() in header else ","


def read_parquet(data: bytes, name: str, _: list[str]) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Parquet's reader (see :class:`grpo_cli.io.formats.Format`): the footer checked first."""
    check_parquet_layout(data, name)
    return pl.read_parquet(io.BytesIO(data)), ()


def read_csv(
    data: bytes, name: str, string_cols: list[str]
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """CSV's reader: ``string_cols`` read as text, then typed back (:func:`typed_keys`)."""
    overrides: dict[str, pl.DataType] = {col: pl.String() for col in string_cols}
    frame = pl.read_csv(
        io.BytesIO(data),
        schema_overrides=overrides,
        infer_schema_length=None,
        separator=csv_separator(data),
    )
    _check_unique_header(frame, name)
    return typed_keys(frame, string_cols), ()


def read_json(data: bytes, name: str, _: list[str]) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """JSON's reader (one array of objects)."""
    return pl.read_json(io.BytesIO(data), infer_schema_length=None), ()


def read_jsonl(data: bytes, name: str, _: list[str]) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """JSONL as Polars reads it, with two fallbacks paid only when Polars fails: ``NaN``
    read as null (:func:`_nan_as_null`), then the fields no one column type fits read as
    JSON text (:func:`_fields_as_text`), named in the one warning. A field of numbers,
    numbers as text and booleans is read as numbers (:func:`_booleans_as_numbers`)."""
    try:
        return _booleans_as_numbers(_read_ndjson(data)), ()
    except pl.exceptions.PolarsError as exc:
        error = exc
    cleaned = _nan_as_null(data)
    if cleaned is not None:
        try:
            return _booleans_as_numbers(_read_ndjson(cleaned)), ()
        except pl.exceptions.PolarsError as exc:  # another line: blame it, not a NaN
            data, error = cleaned, exc
    text, fields = _fields_as_text(data)
    if not fields:
        raise _jsonl_error(data, name, error)
    try:
        frame = _booleans_as_numbers(_read_ndjson(text))
    except pl.exceptions.PolarsError:
        raise _jsonl_error(data, name, error) from None
    texts = [field for field in fields if frame.schema[field] == pl.String]
    if not texts:
        return frame, ()
    return frame, (
        f"{name}: the values of {', '.join(map(repr, texts))} differ in kind from line to "
        "line (objects, lists, numbers, text): carried through as JSON text",
    )


def _read_ndjson(data: bytes) -> pl.DataFrame:
    return pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)


def _fields_as_text(data: bytes) -> tuple[bytes, list[str]]:
    """The JSONL ``data`` with the values of the fields Polars cannot read as one column
    type (:func:`_one_type`) written as JSON text (strings and nulls kept), and those
    fields; ``data`` and none when a line is not one JSON object."""
    rows = _json_objects(data)
    if isinstance(rows, tuple):
        return data, []
    values: dict[str, list[object]] = {}
    for row in rows:
        for key, value in row.items():
            if value is not None:
                values.setdefault(key, []).append(value)
    fields = [key for key, seen in values.items() if not _one_type(seen)]
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for row in rows:
        for key in fields:
            value = row.get(key)
            if value is not None and not isinstance(value, str):
                row[key] = encode(value)
    return "\n".join(map(encode, rows)).encode(), fields


def _one_type(values: list[object]) -> bool:
    """Whether Polars reads one field's ``values`` (no nulls) as one column type; objects
    or lists are tried (one key may hold different kinds on different lines)."""
    kinds = {type(value) for value in values}
    if kinds <= {int, float} or kinds in ({bool}, {str}):
        return True
    if kinds not in ({dict}, {list}):
        return str in kinds and not kinds & {dict, list}  # Polars reads text among scalars
    try:
        _read_ndjson("\n".join(json.dumps({"v": value}) for value in values).encode())
    except pl.exceptions.PolarsError:
        return False
    return True


BOOLEAN_TEXT: Final = ("true", "false")


def _booleans_as_numbers(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (from JSONL) with each text column of numbers and ``true``/``false`` (at
    least one of each, nothing else) read as numbers, booleans 1 and 0; any other column
    is left as it is (``7`` and ``"007"`` stay two keys)."""
    strings = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not strings:
        return frame
    found = frame.select(pl.col(strings).is_in(BOOLEAN_TEXT).any()).row(0)
    candidates = [name for name, flag in zip(strings, found, strict=True) if flag]
    if not candidates:
        return frame
    text = pl.col(candidates)
    numbers = text.cast(pl.Float64, strict=False)
    readable = (text.is_null() | text.is_in(BOOLEAN_TEXT) | numbers.is_not_null()).all() & (
        numbers.is_not_null().any()
    )
    chosen = [
        name for name, flag in zip(candidates, frame.select(readable).row(0), strict=True) if flag
    ]
    if not chosen:
        return frame
    text = pl.col(chosen)
    return frame.with_columns(
        pl.when(text == "true")
        .then(1.0)
        .when(text == "false")
        .then(0.0)
        .otherwise(text.cast(pl.Float64, strict=False))
        .name.keep()
    )


def typed_keys(frame: pl.DataFrame, string_cols: Iterable[str]) -> pl.DataFrame:
    """CSV key columns read as text, given back the number type they read as when every
    value reads back as the very same text: ``7`` is the integer 7, but a column with
    ``007`` (or ``7.50``) stays text, so two keys that differ as text never merge."""
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
    for column in frame.columns:
        match = re.fullmatch(r"(.+)_duplicated_\d+", column)
        if match and match.group(1) in frame.columns:
            raise duplicate_column(name, match.group(1))


def duplicate_column(name: str, column: str) -> InputError:
    """The error for a log with two columns named ``column`` (CSV or Parquet)."""
    return InputError(
        f"{name} has more than one column named {column!r}",
        hint="rename the columns so that every name is unique",
    )


def parse_error(data: bytes, fmt: str, name: str, exc: Exception) -> InputError:
    """The error for ``data`` that ``fmt``'s reader refused with ``exc``: text that is not
    UTF-8 named at its first bad byte, else the cause's first line and the format's hint."""
    if not FORMATS[fmt].binary:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            return InputError(
                f"{name} is not UTF-8 text (byte 0x{data[bad.start]:02x} at offset {bad.start})",
                hint=TEXT_HINT,
            )
    return cannot_read(name, fmt, str(exc))


def _jsonl_error(data: bytes, name: str, exc: Exception) -> InputError:
    """JSONL's parse error: the first line that is not one JSON object, named."""
    try:
        data.decode("utf-8")
        located = _json_objects(data)
    except UnicodeDecodeError:
        located = []
    if not isinstance(located, tuple):
        return parse_error(data, "jsonl", name, exc)
    line_no, problem = located
    hint = 'each line must be one JSON object, e.g. {"prompt_id": "p1", "reward": 1.0}'
    if problem.endswith("is not JSON"):
        hint = "write null for a missing reward, or a finite number"
    return InputError(f"{name} line {line_no}: {problem}", hint=hint)


def _json_objects(data: bytes) -> list[dict[str, Any]] | tuple[int, str]:
    """The non-blank lines of JSONL ``data`` as Python's json module reads them (``NaN``
    and ``Infinity`` refused, as JSON does), or the first line that is not one JSON object:
    its number and what is wrong with it. A per-line pass: error path only."""
    rows = []
    for line_no, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw, parse_constant=_reject_constant)
        except _NotJson as exc:
            return line_no, str(exc)
        except RecursionError:
            return line_no, "JSON nested too deeply to read"
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
            return line_no, f"malformed JSON ({reason})"
        if not isinstance(row, dict):
            return line_no, f"expected a JSON object, got {type(row).__name__}"
        rows.append(row)
    return rows


def _nan_as_null(data: bytes) -> bytes | None:
    """JSONL with Python's ``NaN`` literal rewritten as ``null`` (as CSV and Parquet NaN
    rewards read as null), only the lines that mention it parsed; None when none holds it
    (or such a line has another problem). ``Infinity`` stays refused."""
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
    parts = re.split(r"(\d+)", path.name)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def expand_sources(sources: Sequence[str]) -> list[Path]:
    """Paths of every input: a folder's reward-log files (by suffix), a glob's matches,
    both in natural order."""
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
                named = [f for f in DATA_FORMATS if FORMATS[f].by_suffix]
                raise InputError(
                    f"folder {path} holds no {describe(named, suffixes=True)} file",
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
    """Refuse an input given twice (overlapping globs, a link to a file also given)."""
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
    paths: Sequence[Path],
    fmt: str | None = None,
    *,
    string_cols: Iterable[str] = (),
    source_col: str | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> RewardLog:
    """Read one or several files as one log, rows in file order: columns missing from a
    file are null there, numeric types widened to agree. ``source_col`` adds each row's
    input index (0, 1, ...); ``on_file`` is called after each file (progress)."""
    logs = []
    for index, path in enumerate(paths):
        log = read_rewards(path, fmt, string_cols=string_cols)
        if source_col is not None:
            column = pl.lit(index, dtype=pl.UInt32).alias(source_col)
            log = replace(log, frame=log.frame.with_columns(column))
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
        frame=frame,
        format=formats.pop() if len(formats) == 1 else "parquet",
        source=shown,
        warnings=tuple(warning for log in logs for warning in log.warnings),
    )

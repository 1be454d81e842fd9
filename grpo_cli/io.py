"""Reading reward logs and writing annotated files and tables, safely.

Formats: ``parquet``, ``csv``, ``jsonl`` (one JSON object per line, also ``.ndjson``) and
``json`` (one JSON array of objects). Tables can also be written as ``markdown``.

Detection, in order: an explicit format; the file's suffix; the content's first bytes
(Parquet magic ``PAR1``; first non-blank byte ``{`` for JSONL, ``[`` for a JSON array;
anything else is CSV). ``.json`` files are always sniffed, since many are really JSONL.

Compressed inputs (gzip, zstd, bzip2, xz; by their magic bytes, from files or standard
input) are decompressed first; the format then comes from the suffix under the compression
suffix (``r.jsonl.gz`` is JSONL) or from the content. CSV's delimiter is a comma unless the
header line has none and has semicolons, tabs or pipes. A reward column of numbers written
as text (``"1.0"``) is read as numbers when every value parses (see
:mod:`grpo_cli.compute`).

Writes are atomic: the data goes to a hidden temporary file in the target folder, which
is renamed over the target only once complete, so a failed or interrupted run leaves
no partial file and an existing file is never half-overwritten. Temporary names carry their
owner (``grpo-adv.<pid>@<host>``), so a later run can remove what a killed run left
(:func:`remove_stale_temporaries`) without touching a live run's files. A character device,
FIFO or socket (``/dev/null``, ``mkfifo``, ``>(gzip > x)``), and anything under ``/dev`` or
``/proc`` (``/dev/stdout``), is written to as a stream: no temporary file, no rename, no
``force`` needed, and it is never replaced or removed. An output named with a compression
suffix (``.gz``, ``.zst``, ``.bz2``, ``.xz``) is compressed. A full disk is an output error
naming the path (exit 4), and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Final

import polars as pl

from grpo_cli.errors import (
    InputError,
    Message,
    OptionsError,
    OutputError,
    is_disk_full,
    option,
)

DATA_FORMATS: Final = ("parquet", "csv", "jsonl", "json")

SUFFIX_FORMATS: Final[dict[str, str]] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".md": "markdown",
    ".markdown": "markdown",
}
FORMAT_SUFFIXES: Final[dict[str, str]] = {
    "parquet": ".parquet",
    "csv": ".csv",
    "jsonl": ".jsonl",
    "json": ".json",
    "markdown": ".md",
}
PARQUET_MAGIC: Final = b"PAR1"
# zstd level 1: Parquet outputs are written faster than at Polars' default level 3,
# for files about 10% larger (still smaller than the snappy of DuckDB's and pandas' writers).
PARQUET_ZSTD_LEVEL: Final = 1
COMPRESSION_MAGIC: Final = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
}
COMPRESSION_SUFFIXES: Final = {
    ".gz": "gzip",
    ".gzip": "gzip",
    ".zst": "zstd",
    ".zstd": "zstd",
    ".bz2": "bz2",
    ".xz": "xz",
}
CSV_SEPARATORS: Final = (";", "\t", "|")
SNIFF_BYTES: Final = 4096
STDIN_NAME: Final = "<stdin>"


@dataclass(frozen=True)
class RewardLog:
    """A reward log read into memory, with the format it was read as."""

    frame: pl.DataFrame
    format: str
    source: str


def normalize_format(name: str, *, allowed: Sequence[str] = DATA_FORMATS) -> str:
    """Map a user-given format name (``ndjson``, ``md``, ``pq`` ...) to a canonical one."""
    aliases = {"ndjson": "jsonl", "md": "markdown", "pq": "parquet"}
    canonical = aliases.get(name.lower(), name.lower())
    if canonical not in allowed:
        raise OptionsError(
            f"unknown format {name!r}",
            hint=f"choose one of: {', '.join(allowed)}",
        )
    return canonical


def sniff_format(head: bytes) -> str:
    """Guess a data format from the first bytes of a file or stream."""
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"{"):
        return "jsonl"
    if text.startswith(b"["):
        return "json"
    return "csv"


def format_from_suffix(path: Path) -> str | None:
    """The format a file's suffix names, or None (``.json`` and unknown suffixes); under a
    compression suffix, the one before it (``r.jsonl.gz``: jsonl)."""
    return SUFFIX_FORMATS.get(uncompressed_name(path).suffix.lower())


def uncompressed_name(path: Path) -> Path:
    """``path`` without a compression suffix (``r.jsonl.gz`` -> ``r.jsonl``)."""
    return path.with_suffix("") if path.suffix.lower() in COMPRESSION_SUFFIXES else path


def compression_of(data: bytes) -> str | None:
    """The compression whose magic bytes start ``data``, or None."""
    for magic, name in COMPRESSION_MAGIC.items():
        if data.startswith(magic):
            return name
    return None


def decompress(data: bytes, name: str) -> bytes:
    """``data`` decompressed when it starts with a known compression's magic bytes."""
    codec = compression_of(data)
    if codec is None:
        return data
    import bz2
    import gzip
    import lzma

    try:
        if codec == "gzip":
            return gzip.decompress(data)
        if codec == "bz2":
            return bz2.decompress(data)
        if codec == "xz":
            return lzma.decompress(data)
        import pyarrow as pa

        with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
            return bytes(stream.read())
    except (OSError, EOFError, ValueError, lzma.LZMAError):
        tester = {"gzip": "gzip", "zstd": "zstd", "bz2": "bzip2", "xz": "xz"}[codec]
        raise InputError(
            f"cannot decompress {name} ({codec}): the data is truncated or corrupt",
            hint=f"check the file ({tester} -t), or decompress it yourself",
        ) from None


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
        raise InputError(
            f"{name} has no rows (columns: {', '.join(frame.columns) or 'none'})",
            hint="give a reward log with at least one row",
        )
    return RewardLog(frame=frame, format=fmt, source=name)


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


def check_parquet_file(path: Path) -> None:
    """For the engines that read a Parquet file themselves (``--low-memory``, ``--backend
    ray``): raise unless ``path`` starts (OptionsError) and ends (InputError: truncated)
    like a Parquet file, and its footer describes data that lies inside the file
    (:func:`check_parquet_layout`), reading the footer only."""
    with path.open("rb") as handle:
        head = handle.read(4)
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - 4, 0))
        tail = handle.read(4)
    if head != PARQUET_MAGIC:
        low_memory = option("backend", "partitioned", alias="alone")
        raise OptionsError(
            low_memory + f" needs a Parquet input; {path} is not Parquet",
            hint='convert it to Parquet first (python -c "import polars as pl; '
            "pl.scan_csv('IN.csv').sink_parquet('IN.parquet')\"), or drop " + low_memory,
            path=path,
        )
    if tail != PARQUET_MAGIC or size < 12:
        raise truncated_parquet(str(path))
    check_parquet_layout(path, str(path), PARQUET_DAMAGED_HINT)


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
    return InputError(f"cannot read {name} as parquet: {_first_line(plain)}", hint=hint)


def check_parquet_layout(source: Path | bytes, name: str, hint: Message = PARQUET_HINT) -> None:
    """Raise an InputError unless the Parquet footer of ``source`` (a path, or the file's
    bytes) can be read and every column chunk it lists lies inside the file, before the
    footer. A file cut in the middle with its footer re-appended passes the magic-byte
    checks, and Polars' readers panic on it instead of reporting an error."""
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
    detail = _first_line(str(exc))
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


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else "unknown error"


# --------------------------------------------------------------------------- writing


def output_format_for(path: Path, requested: str | None, fallback: str) -> str:
    """Choose the output format: ``requested`` (checked against the suffix), the suffix,
    or ``fallback`` (usually the input's format)."""
    by_suffix = format_from_suffix(path)
    if uncompressed_name(path).suffix.lower() == ".json":
        by_suffix = "json"
    if requested is not None:
        if by_suffix is not None and by_suffix != requested:
            raise OptionsError(
                option("output_format", requested) + f" does not match the suffix of {path}",
                hint=f"name the file with {FORMAT_SUFFIXES[requested]}, or drop "
                + option("output_format"),
                value=requested,
                path=path,
            )
        return requested
    return by_suffix or fallback


def default_output_path(input_path: Path, input_fmt: str, output_fmt: str) -> Path:
    """``<stem>.adv.<suffix>`` beside the input; the input's suffix kept when formats agree
    (a compressed input gives an uncompressed output: ``r.jsonl.gz`` -> ``r.adv.jsonl``)."""
    input_path = uncompressed_name(input_path)
    suffix = input_path.suffix
    if output_fmt != input_fmt or format_from_suffix(input_path) != input_fmt:
        suffix = FORMAT_SUFFIXES[output_fmt]
    stem = input_path.stem if input_path.suffix else input_path.name
    return input_path.with_name(f"{stem}.adv{suffix}")


def frame_to_markdown(frame: pl.DataFrame, float_format: str = "{:.6g}") -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (floats to 6 significant digits)."""

    def cell(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return float_format.format(value)
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(frame.columns) + " |",
        "|" + "|".join("---" for _ in frame.columns) + "|",
    ]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows())
    return "\n".join(lines) + "\n"


def write_frame(frame: pl.DataFrame, sink: IO[bytes], fmt: str) -> None:
    """Write ``frame`` to an open binary stream in ``fmt``."""
    try:
        if fmt == "parquet":
            frame.write_parquet(sink, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)
        elif fmt == "csv":
            frame.write_csv(sink)
        elif fmt == "jsonl":
            frame.write_ndjson(sink)
        elif fmt == "json":
            sink.write(frame.write_json().encode())
        elif fmt == "markdown":
            sink.write(frame_to_markdown(frame).encode())
        else:
            raise OptionsError(f"unknown format {fmt!r}")
    except pl.exceptions.PolarsError as exc:
        if "broken pipe" in str(exc).lower():
            # The reader closed the pipe (``| head``): not a failure of ours.
            raise BrokenPipeError(errno.EPIPE, "Broken pipe") from None
        if is_disk_full(exc):
            raise OSError(errno.ENOSPC, "No space left on device") from None
        nested = any(isinstance(t, pl.List | pl.Struct | pl.Array) for t in frame.dtypes)
        hint: Message = (
            "nested columns need " + option("output_format", "parquet") + " or jsonl"
            if nested and fmt == "csv"
            else "check the output path and its device; Parquet and JSONL write any column"
        )
        raise OutputError(f"cannot write {fmt}: {_first_line(str(exc))}", hint=hint) from None


def is_same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name one file (through links too)."""
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def is_stream(path: Path) -> bool:
    """Whether ``path`` is written to as a stream, never replaced: an existing character
    device, FIFO or socket (``/dev/null``, ``mkfifo p``, the pipe of ``>(gzip > x)``), or an
    existing path under ``/dev`` or ``/proc`` (``/dev/stdout`` redirected to a file)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return True
    parts = path.absolute().parts
    return len(parts) > 1 and parts[1] in ("dev", "proc")


def compression_for(path: Path) -> str | None:
    """The compression an output's name asks for (``o.jsonl.gz``: gzip), or None."""
    return COMPRESSION_SUFFIXES.get(path.suffix.lower())


@contextlib.contextmanager
def compressed(sink: IO[bytes], codec: str | None) -> Iterator[IO[bytes]]:
    """``sink`` itself, or a stream that compresses into it with ``codec`` (gzip at level 6
    as the gzip tool's default, bz2, xz, zstd through pyarrow); closing the stream writes
    the codec's trailer and leaves ``sink`` open."""
    if codec is None:
        yield sink
        return
    import bz2
    import gzip
    import lzma

    stream: Any
    if codec == "gzip":
        stream = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=6)
    elif codec == "bz2":
        stream = bz2.BZ2File(sink, "wb")
    elif codec == "xz":
        stream = lzma.LZMAFile(sink, "wb")  # noqa: SIM115 (closed below)
    else:
        import pyarrow as pa

        stream = pa.CompressedOutputStream(pa.PythonFile(sink, mode="w"), "zstd")
    with stream:
        yield stream


def check_output_path(
    path: Path, *, force: bool, protected: Sequence[Path] = (), flag: Message = OUTPUT
) -> None:
    """Refuse to write over an input (ever) or over an existing file (without ``force``);
    a stream (see :func:`is_stream`) needs no ``force``."""
    if is_stream(path):
        return
    for original in protected:
        if is_same_file(path, original) or path.resolve() == original.resolve():
            raise OutputError(
                f"refusing to overwrite the input {original}",
                hint="choose another output path with " + OUTPUT,
            )
    if path.is_dir():
        raise OutputError(
            f"{path} is a directory", hint="give a file path with " + OUTPUT, path=path
        )
    if path.exists() and not force:
        raise OutputError(
            f"{path} already exists",
            hint="pass " + FORCE + " to overwrite it, or choose another " + flag,
            path=path,
        )
    if not path.parent.is_dir():
        raise OutputError(
            f"folder {path.parent} does not exist",
            hint="create it first, or choose another " + OUTPUT,
            path=path,
        )


OWNER_PATTERN: Final = re.compile(r"grpo-adv\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def owner_tag() -> str:
    """``grpo-adv.<pid>@<host>``: marks this process's temporary files and folders."""
    return f"grpo-adv.{os.getpid()}@{_host()}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale_temporaries(folder: Path) -> tuple[list[Path], int]:
    """Remove the temporary files and spill folders that killed grpo-adv runs (``kill -9``,
    the OOM killer) left in ``folder``: hidden entries whose owner tag names a process of
    this host that no longer exists. A live run's files, another host's, and anything
    without a tag are left alone. Returns the removed paths and their size in bytes."""
    removed: list[Path] = []
    size = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed, size
    host = _host()
    for entry in entries:
        match = OWNER_PATTERN.search(entry.name)
        if not entry.name.startswith(".") or match is None or match["host"] != host:
            continue
        if _alive(int(match["pid"])):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                size += sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
                shutil.rmtree(entry)
            else:
                size += entry.lstat().st_size
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed, size


def spill_parent(target: Path) -> Path:
    """Where a run's spill folder goes: beside ``target``, or the system's temporary folder
    when ``target`` is a stream (never a folder in /dev)."""
    return Path(tempfile.gettempdir()) if is_stream(target) else target.parent


def make_spill_folder(parent: Path) -> Path:
    """A new hidden folder in ``parent`` tagged with this process (see :func:`owner_tag`)."""
    return Path(tempfile.mkdtemp(prefix=f".{owner_tag()}.", suffix=".spill", dir=parent))


def remove_spill_folder(folder: Path, *, settle_s: float = 2.0) -> None:
    """Remove ``folder`` and everything in it. Polars' partitioned sink can still be
    finishing a file on another thread when its error reaches us (a full disk), and it
    creates missing folders: removal is retried until the folder stays gone (at most
    ``settle_s`` seconds)."""
    import time

    deadline = time.monotonic() + settle_s
    while True:
        shutil.rmtree(folder, ignore_errors=True)
        time.sleep(0.05)  # gone, and still gone a moment later
        if not folder.exists() or time.monotonic() > deadline:
            return


def _disk_full(path: Path) -> OutputError:
    return OutputError(
        f"no space left on the device of {path}; nothing was written",
        hint=f"free some space on it (df -h {path.parent}), or write elsewhere with " + OUTPUT,
    )


def _stream_disk_full(path: Path) -> OutputError:
    return OutputError(
        f"no space left on device writing {path}",
        hint="free some space where it goes, or write elsewhere with " + OUTPUT,
    )


def _temporary_file(path: Path) -> Path:
    """A new empty hidden file beside ``path``, tagged with this process."""
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.{owner_tag()}.", suffix=".part"
        )
    except OSError as exc:
        raise _staging_error(path, exc) from None
    os.close(fd)
    return Path(tmp_name)


@contextlib.contextmanager
def atomic_path(path: Path, *, force: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path``, put in place at ``path`` when the block succeeds
    (:func:`commit`: without ``force``, only if nothing appeared at ``path`` meanwhile).

    On any failure (an exception, Ctrl-C) the temporary file is removed and ``path`` is
    left as it was; a full disk becomes an :class:`OutputError` naming ``path``. A stream
    (see :func:`is_stream`) is yielded itself: written in place, never renamed or removed.
    """
    if is_stream(path):
        try:
            yield path
        except Exception as exc:
            if is_disk_full(exc):
                raise _stream_disk_full(path) from None
            raise
        return
    tmp = _temporary_file(path)
    try:
        yield tmp
        commit([(tmp, path)], force=force)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(exc, Exception) and is_disk_full(exc):
            raise _disk_full(path) from None
        raise


def commit(staged: Sequence[tuple[Path, Path]], *, force: bool) -> None:
    """Put every staged temporary ``(tmp, target)`` in place, all or none, as one decision
    that a signal cannot split (:func:`grpo_cli.interrupts.deferred`): a Ctrl-C or SIGTERM
    recorded before it raises there and nothing lands; one arriving after the decision is
    dropped, and the run ends as a success. Without ``force`` each rename is exclusive
    (:func:`publish`): if a target appeared meanwhile (another run), the run fails with an
    OutputError naming it and the targets it had already put in place are removed again.
    With ``force`` each target is replaced atomically."""
    from grpo_cli import interrupts

    mode = 0o666 & ~_umask()
    for tmp, _ in staged:
        tmp.chmod(mode)
    with interrupts.deferred():
        interrupts.check()  # the last moment to give up: nothing has landed
        landed: list[Path] = []
        try:
            for tmp, target in staged:
                publish(tmp, target, replace=force)
                landed.append(target)
        except BaseException:
            if not force:  # these are ours, made a moment ago
                for target in landed:
                    with contextlib.suppress(OSError):
                        target.unlink()
            raise
        interrupts.mark_committed()


def _appeared(path: Path) -> OutputError:
    return OutputError(
        f"{path} already exists: another run wrote it while this one ran; this run wrote nothing",
        hint="pass " + FORCE + " to overwrite it, or choose another output path",
        path=path,
    )


_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


def _rename_noreplace(source: Path, target: Path) -> bool:
    """``rename(source, target)`` that fails if ``target`` exists (Linux ``renameat2``
    with RENAME_NOREPLACE, files and folders alike). False when the system or the file
    system does not offer it; FileExistsError when ``target`` exists."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(
        _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False  # not offered here: the fallback below
    raise OSError(code, os.strerror(code), str(target))


def publish(tmp: Path, target: Path, *, replace: bool) -> None:
    """Rename ``tmp`` (a file or a folder) to ``target``. ``replace``: atomically over
    whatever is there. Otherwise exclusively: an OutputError if ``target`` exists, also
    when it appeared a moment ago (``renameat2`` RENAME_NOREPLACE; where that is missing,
    a hard link, which fails on an existing name, then removing ``tmp``; for a folder, an
    exclusive ``mkdir`` of ``target`` claims the name and the rename replaces that empty
    folder)."""
    if replace:
        tmp.replace(target)
        return
    try:
        if _rename_noreplace(tmp, target):
            return
        if tmp.is_dir():
            target.mkdir()  # the claim: fails if anything has the name
            tmp.replace(target)
            return
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise
        except OSError:  # no hard links here: claim the name, then replace the claim
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            tmp.replace(target)
            return
        tmp.unlink()
    except FileExistsError:
        raise _appeared(target) from None


def check_output_folder(path: Path, *, force: bool, protected: Sequence[Path] = ()) -> None:
    """Refuse to write a folder of part files over an input (ever), or over an existing
    folder or file (without ``force``), or where its parent is missing."""
    for original in protected:
        resolved = path.resolve()
        if resolved == original.resolve() or original.resolve().is_relative_to(resolved):
            raise OutputError(
                f"refusing to overwrite the input {original}",
                hint="choose another output folder with " + OUTPUT,
            )
    if (path.exists() or path.is_symlink()) and not force:
        raise OutputError(
            f"{path} already exists",
            hint="pass " + FORCE + " to replace it, or choose another " + OUTPUT,
            path=path,
        )
    if not path.parent.is_dir():
        raise OutputError(
            f"folder {path.parent} does not exist",
            hint="create it first, or choose another " + OUTPUT,
            path=path,
        )


@contextlib.contextmanager
def atomic_folder(path: Path, *, force: bool = False) -> Iterator[Path]:
    """A new hidden folder beside ``path`` (tagged with this process, see
    :func:`owner_tag`), renamed to ``path`` when the block succeeds, as one decision a
    signal cannot split (see :func:`commit`). Without ``force`` the rename is exclusive
    (:func:`publish`: an OutputError if ``path`` appeared meanwhile); with ``force``, what
    was at ``path`` is removed only once the new folder is in place. On any failure the
    folder is removed and ``path`` is left as it was: a failed or interrupted run leaves
    no partial dataset."""
    from grpo_cli import interrupts

    try:
        tmp = Path(
            tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{owner_tag()}.", suffix=".part")
        )
    except OSError as exc:
        raise _staging_error(path, exc) from None
    try:
        yield tmp
        tmp.chmod(0o777 & ~_umask())
        with interrupts.deferred():
            interrupts.check()
            if force and (path.exists() or path.is_symlink()):
                old = Path(
                    tempfile.mkdtemp(
                        dir=path.parent, prefix=f".{path.name}.{owner_tag()}.", suffix=".old"
                    )
                )
                path.replace(old / path.name)
                tmp.replace(path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                publish(tmp, path, replace=False)
            interrupts.mark_committed()
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception) and is_disk_full(exc):
            raise _disk_full(path) from None
        raise


def _staging_error(path: Path, exc: OSError) -> OutputError:
    """Why the temporary file or folder beside ``path`` could not be made."""
    if is_disk_full(exc):
        return _disk_full(path)
    return OutputError(
        f"cannot write to {path.parent}: {exc.strerror or exc}",
        hint="check the folder's permissions, or choose another " + OUTPUT,
    )


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def atomic_write(path: Path, write: Callable[[IO[bytes]], None], *, force: bool = False) -> None:
    """Call ``write`` on a temporary file beside ``path``, then put it in place (see
    :func:`commit`; ``force``: replacing what is there); compressed when ``path`` ends in
    a compression suffix."""
    with atomic_writes(force=force) as stage:
        stage(path, write)


Stage = Callable[[Path, Callable[[IO[bytes]], None]], None]


@contextlib.contextmanager
def atomic_writes(*, force: bool = False) -> Iterator[Stage]:
    """Several outputs that land together: ``stage(path, write)`` writes each one to its
    temporary file (compressed by its name's suffix), and only when the block ends without
    error are they all put in place, as one decision (:func:`commit`; ``force``: replacing
    what is there, else exclusively). If one fails (a full disk, Ctrl-C, a target that
    appeared meanwhile), none of the targets is touched and every temporary file is
    removed. A stream (:func:`is_stream`) is written at once, in place."""
    staged: list[tuple[Path, Path]] = []

    def stage(path: Path, write: Callable[[IO[bytes]], None]) -> None:
        streamed = is_stream(path)
        if not streamed:
            staged.append((_temporary_file(path), path))
        where = path if streamed else staged[-1][0]
        try:
            with where.open("wb") as handle, compressed(handle, compression_for(path)) as sink:
                write(sink)
        except Exception as exc:
            if is_disk_full(exc):
                raise (_stream_disk_full(path) if streamed else _disk_full(path)) from None
            raise

    try:
        yield stage
        commit(staged, force=force)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise


TABLE_FORMATS: Final = (*DATA_FORMATS, "markdown")


def table_format(path: Path, requested: str | None = None) -> str:
    """The format of a table file: ``requested`` (``md`` is markdown), else from the
    suffix (under any compression suffix); standard output (``-``) is CSV unless
    requested."""
    if requested is not None:
        return normalize_format(requested, allowed=TABLE_FORMATS)
    if str(path) == "-":
        return "csv"
    fmt = format_from_suffix(path) or (
        "json" if uncompressed_name(path).suffix.lower() == ".json" else None
    )
    if fmt is None:
        raise OptionsError(
            f"cannot tell the table format of {path}",
            hint="end the file name with .csv, .parquet, .jsonl, .json or .md, or name it "
            "with " + option("output_format"),
            path=path,
        )
    return fmt


def write_table(
    frame: pl.DataFrame,
    path: Path,
    *,
    force: bool,
    protected: Sequence[Path] = (),
    stage: Stage | None = None,
    fmt: str | None = None,
    flag: Message = OUTPUT,
) -> str:
    """Write a (summary) table to ``path`` (``-``: standard output), in ``fmt`` or the
    format of its suffix; returns the format. With ``stage`` (see :func:`atomic_writes`),
    it lands together with the other outputs."""
    fmt = table_format(path, fmt)
    if str(path) == "-":
        sink = sys.stdout.buffer
        write_frame(frame, sink, fmt)
        sink.flush()
        return fmt
    check_output_path(path, force=force, protected=protected, flag=flag)
    if stage is None:
        atomic_write(path, lambda sink: write_frame(frame, sink, fmt), force=force)
    else:
        stage(path, lambda sink: write_frame(frame, sink, fmt))
    return fmt


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
            matches = sorted(map(Path, glob.glob(source)), key=_natural_key)  # noqa: PTH207
            if not matches:
                raise InputError(f"no file matches {source}", hint="check the pattern")
            paths.extend(matches)
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
            f"cannot combine the {len(paths)} inputs into one log: {_first_line(str(exc))}",
            hint="the files must share their column types",
        ) from None
    formats = {log.format for log in logs}
    shown = f"{len(paths)} files ({paths[0]} ... {paths[-1]})"
    return RewardLog(
        frame=frame, format=formats.pop() if len(formats) == 1 else "parquet", source=shown
    )

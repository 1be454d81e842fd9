"""File formats and the kinds of path: ``parquet``, ``csv``, ``jsonl`` (one JSON object per
line, also ``.ndjson``), ``json`` (one array of objects), and ``markdown`` for tables;
compression by magic bytes or suffix (gzip, zstd, bzip2, xz); and whether a target is a file
or a stream (a character device, FIFO or socket, anything under ``/dev`` or ``/proc``).

Detection, in order: an explicit format; the file's suffix (under any compression suffix:
``r.jsonl.gz`` is JSONL); the content's first bytes (Parquet magic ``PAR1``; first non-blank
byte ``{`` for JSONL, ``[`` for a JSON array; anything else is CSV). ``.json`` files are
always sniffed, since many are really JSONL.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

from grpo_cli.core.errors import (
    InputError,
    Message,
    OptionsError,
    first_line,
    option,
)

DATA_FORMATS: Final = ("parquet", "csv", "jsonl", "json")
FORMAT_OPTION: Final = option("output_format")
"""The option that names an output's format, named in messages."""

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
SNIFF_BYTES: Final = 4096
STDIN_NAME: Final = "<stdin>"


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


def error_line(text: str) -> str:
    """The first line of a library's error text, for grpo-adv's one-line errors ("unknown
    error" when it has none)."""
    return first_line(text, "unknown error")


# --------------------------------------------------------------------------- writing


def written_format(path: Path) -> str | None:
    """The format an output's suffix names (under any compression suffix), ``.json``
    included, or None."""
    if uncompressed_name(path).suffix.lower() == ".json":
        return "json"
    return format_from_suffix(path)


def unknown_suffix(
    path: Path, what: str, formats: Sequence[str], flag: Message | None
) -> OptionsError:
    """The error for an output whose suffix names none of ``formats``: the suffixes that
    do, and ``flag``, the option that names the format (None: the command has none)."""
    *most, last = (FORMAT_SUFFIXES[fmt] for fmt in formats)
    hint: Message = f"end the file name with {', '.join(most)} or {last}"
    if flag is not None:
        hint = hint + ", or name the format with " + flag
    return OptionsError(f"cannot tell the {what} format of {path}", hint=hint, path=path)


def output_format_for(path: Path, requested: str | None, fallback: str) -> str:
    """Choose the output format: ``requested`` (checked against the suffix, any suffix
    when the suffix names no format: the user chose), the suffix, or ``fallback`` (usually
    the input's format) for a name without a suffix or a stream (``/dev/stdout``, a FIFO).
    A suffix that names no format (``out.xlsx``, ``out.txt``) is refused."""
    by_suffix = written_format(path)
    suffix = uncompressed_name(path).suffix
    if by_suffix is None and requested is None and suffix and not is_stream(path):
        raise unknown_suffix(path, "output", DATA_FORMATS, FORMAT_OPTION)
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
    """``<stem>.adv.<suffix>`` beside the input; the input's suffix kept when formats agree,
    and its compression suffix unless the output is Parquet (compressed inside):
    ``r.jsonl.gz`` -> ``r.adv.jsonl.gz``, ``r.csv.zst`` -> ``r.adv.parquet`` in Parquet."""
    plain = uncompressed_name(input_path)
    suffix = plain.suffix
    if output_fmt != input_fmt or format_from_suffix(plain) != input_fmt:
        suffix = FORMAT_SUFFIXES[output_fmt]
    if output_fmt != "parquet" and plain != input_path:
        suffix += input_path.suffix
    stem = plain.stem if plain.suffix else plain.name
    return plain.with_name(f"{stem}.adv{suffix}")


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


TABLE_FORMATS: Final = (*DATA_FORMATS, "markdown")


def table_format(
    path: Path, requested: str | None = None, flag: Message | None = FORMAT_OPTION
) -> str:
    """The format of a table file: ``requested`` (``md`` is markdown), else from the
    suffix (under any compression suffix); standard output (``-``) is CSV unless
    requested. ``flag``: the option that names the format, for the error (None: the
    command has none, as ``verify --diff-out``)."""
    if requested is not None:
        return normalize_format(requested, allowed=TABLE_FORMATS)
    if str(path) == "-":
        return "csv"
    fmt = written_format(path)
    if fmt is None:
        raise unknown_suffix(path, "table", TABLE_FORMATS, flag)
    return fmt

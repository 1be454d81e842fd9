"""The format registry (FORMATS: one entry per file format, which every reader, writer,
engine and help text iterates), compression by magic bytes or suffix, and whether a target
is a file or a stream.

Detection, in order: an explicit format; the file's suffix (under any compression suffix:
``r.jsonl.gz`` is JSONL; ``.json`` is always sniffed, since many are really JSONL); the
content's first bytes (a format's magic bytes; first non-blank byte ``{`` for JSONL, ``[``
for a JSON array; any other text is CSV).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Literal

from grpo_cli.core.errors import (
    InputError,
    Message,
    OptionsError,
    first_line,
    option,
)

if TYPE_CHECKING:
    import polars as pl

FORMAT_OPTION: Final = option("output_format")
"""The option that names an output's format, named in messages."""
# zstd level 1: faster to write than Polars' default level 3, for files about 10% larger.
PARQUET_ZSTD_LEVEL: Final = 1
COMPRESSION_MAGIC: Final = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
}
_TESTERS: Final = {"gzip": "gzip", "zstd": "zstd", "bz2": "bzip2", "xz": "xz"}
"""The command that tests a file of each compression (``gzip -t``)."""
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


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """The function ``grpo_cli.io.<module>.<name>``, imported at its first call (``--help``
    reads the registry without importing Polars)."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(f"grpo_cli.io.{module}"), name)(*args)

    return call


@dataclass(frozen=True)
class Format:
    """One file format. Every reader, writer, engine and help text iterates FORMATS.

    Attributes:
        name: its name (``--format``'s value, and the name messages use).
        suffixes: the file suffixes that name it; the first is the one written.
        aliases: other names the format options accept (``pq``).
        read: (bytes, name, string_cols) -> (frame, warnings): a whole log, decompressed.
            None: not read.
        write: (frame, binary stream): the whole frame.
        magic: the first bytes of its content (a binary format); empty: a text format.
        starts: a text format's first non-blank byte (``{``); CSV is text with none.
        scan: path -> LazyFrame, for a file starting with ``scan_magic`` (the file engines
            read it lazily; None: read whole).
        rows: (path, name, hint) -> the row count of such a file (from its footer), an
            InputError with ``hint`` (None: ``parse_hint``) when it is damaged.
        by_suffix: its suffix names it (False: ``.json``, always sniffed).
        nested: writes list and struct columns (not CSV).
        parse_hint: the hint of an error parsing it.
        data: a reward log (False: markdown, a table that is only written).
    """

    name: str
    suffixes: tuple[str, ...]
    write: Callable[[pl.DataFrame, IO[bytes]], object]
    read: Callable[[bytes, str, list[str]], tuple[pl.DataFrame, tuple[str, ...]]] | None = None
    aliases: tuple[str, ...] = ()
    magic: tuple[bytes, ...] = ()
    starts: bytes = b""
    scan: Callable[[Path], pl.LazyFrame] | None = None
    rows: Callable[[Path, str, Message | None], int] | None = None
    by_suffix: bool = True
    nested: bool = True
    parse_hint: Message = ""
    data: bool = True

    @property
    def binary(self) -> bool:
        """Not text: compressed inside, never written to a terminal, not checked as UTF-8."""
        return bool(self.magic)

    @property
    def scan_magic(self) -> bytes:
        """The first bytes of a file ``scan`` reads (the first magic; empty: no scan)."""
        return self.magic[0] if self.scan else b""


_OTHER: Final = " to read it as another format"
ARROW_FILE: Final = b"ARROW1"
"""The first bytes of an Arrow IPC file; an IPC stream (Hugging Face ``datasets``' cache)
starts with 0xFFFFFFFF."""
ARROW_STREAM: Final = b"\xff\xff\xff\xff"


def _read_arrow(data: bytes, name: str, _: list[str]) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Arrow IPC's reader: a file or a stream, by its first bytes (neither: refused)."""
    import polars as pl

    check_magic(data, "arrow", name)
    read = pl.read_ipc if data.startswith(ARROW_FILE) else pl.read_ipc_stream
    return _arrow_errors(lambda: read(io.BytesIO(data)), name, FORMATS["arrow"].parse_hint), ()


def _scan_arrow(path: Path) -> pl.LazyFrame:
    """An Arrow IPC file, lazily (the name never a pattern: see ``scan_parquet_file``)."""
    import polars as pl

    return pl.scan_ipc(path, glob=False)


def _arrow_rows(path: Path, name: str, hint: Message | None) -> int:
    """The row count of an Arrow IPC file (its footer); a damaged file is an InputError."""
    import polars as pl

    return int(
        _arrow_errors(lambda: _scan_arrow(path).select(pl.len()).collect(), name, hint).item()
    )


def _arrow_errors(
    read: Callable[[], pl.DataFrame], name: str, hint: Message | None
) -> pl.DataFrame:
    """``read()``, whose failure (Polars' error, its panic, an OSError on a cut file) is an
    InputError naming ``name``."""
    import polars as pl

    try:
        return read()
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError) as exc:
        raise cannot_read(name, "arrow", str(exc), hint) from None


FORMATS: Final[dict[str, Format]] = {
    f.name: f
    for f in (
        Format(
            "parquet",
            (".parquet", ".pq"),
            lambda frame, sink: frame.write_parquet(
                sink, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL
            ),
            _lazy("read", "read_parquet"),
            aliases=("pq",),
            magic=(b"PAR1",),
            scan=_lazy("read", "scan_parquet_file"),
            rows=_lazy("read", "check_parquet_layout"),
            parse_hint="the file may be truncated or not Parquet; pass "
            + option("input_format")
            + " to read it as another",
        ),
        Format(
            "csv",
            (".csv",),
            lambda frame, sink: frame.write_csv(sink),
            _lazy("read", "read_csv"),
            nested=False,
            parse_hint="check the delimiter and quoting; pass " + option("input_format") + _OTHER,
        ),
        Format(
            "jsonl",
            (".jsonl", ".ndjson"),
            lambda frame, sink: frame.write_ndjson(sink),
            _lazy("read", "read_jsonl"),
            aliases=("ndjson",),
            starts=b"{",
            parse_hint="each line must be one JSON object",
        ),
        Format(
            "json",
            (".json",),
            lambda frame, sink: sink.write(frame.write_json().encode()),
            _lazy("read", "read_json"),
            starts=b"[",
            by_suffix=False,
            parse_hint="a .json file must hold one array of objects, or one object per line",
        ),
        Format(
            "arrow",
            (".arrow", ".feather", ".ipc"),
            lambda frame, sink: frame.write_ipc(sink, compression="zstd"),
            _read_arrow,
            aliases=("feather", "ipc"),
            magic=(ARROW_FILE, ARROW_STREAM),
            scan=_scan_arrow,
            rows=_arrow_rows,
            parse_hint="the file may be truncated or not Arrow IPC; pass "
            + option("input_format")
            + _OTHER,
        ),
        Format(
            "markdown",
            (".md", ".markdown"),
            _lazy("write", "write_markdown"),
            aliases=("md",),
            data=False,
        ),
    )
}
DATA_FORMATS: Final = tuple(name for name, f in FORMATS.items() if f.data)
TABLE_FORMATS: Final = tuple(FORMATS)
SNIFF_FALLBACK: Final = "csv"
"""The format of text whose first bytes are no other format's."""


def describe(names: Sequence[str], *, suffixes: bool = False, last: str = "or") -> str:
    """``names`` for a message or a help text: ``parquet, csv or jsonl``, or with
    ``suffixes`` the suffixes that name them (``.parquet, .pq, .csv, .jsonl or .ndjson``)."""
    shown = [s for n in names for s in FORMATS[n].suffixes] if suffixes else list(names)
    return f" {last} ".join([", ".join(shown[:-1]), shown[-1]]) if len(shown) > 1 else shown[0]


def normalize_format(name: str, *, allowed: Sequence[str] = DATA_FORMATS) -> str:
    """Map a user-given format name (``ndjson``, ``md``, ``pq`` ...) to a canonical one."""
    lower = name.lower()
    canonical = next((f.name for f in FORMATS.values() if lower in f.aliases), lower)
    if canonical not in allowed:
        raise OptionsError(
            f"unknown format {name!r}",
            hint=f"choose one of: {', '.join(allowed)}",
        )
    return canonical


def sniff_format(head: bytes) -> str:
    """Guess a data format from the first bytes of a file or stream: a format's magic
    bytes, else a text format's first non-blank byte, else SNIFF_FALLBACK."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    for fmt in FORMATS.values():
        if head.startswith(fmt.magic) if fmt.magic else fmt.starts and text.startswith(fmt.starts):
            return fmt.name
    return SNIFF_FALLBACK


def scanned_format(path: Path) -> Format | None:
    """The format whose ``scan`` reads the file ``path`` (it starts with that format's
    ``scan_magic``), or None: read whole (a compressed or text file, an Arrow stream)."""
    with path.open("rb") as handle:
        head = handle.read(16)
    found = (f for f in FORMATS.values() if f.scan_magic and head.startswith(f.scan_magic))
    return next(found, None)


def format_from_suffix(path: Path, *, written: bool = False) -> str | None:
    """The format a file's suffix names, or None; under a compression suffix, the one
    before it (``r.jsonl.gz``: jsonl). ``.json`` names one only when ``written`` (an
    input's is sniffed)."""
    suffix = uncompressed_name(path).suffix.lower()
    found = (f for f in FORMATS.values() if (written or f.by_suffix) and suffix in f.suffixes)
    return next((f.name for f in found), None)


def uncompressed_name(path: Path) -> Path:
    """``path`` without a compression suffix (``r.jsonl.gz`` -> ``r.jsonl``)."""
    return path.with_suffix("") if path.suffix.lower() in COMPRESSION_SUFFIXES else path


def compression_of(data: bytes) -> str | None:
    """The compression whose magic bytes start ``data``, or None."""
    return next((name for magic, name in COMPRESSION_MAGIC.items() if data.startswith(magic)), None)


def decompress(data: bytes, name: str) -> bytes:
    """``data`` decompressed when it starts with a known compression's magic bytes."""
    codec = compression_of(data)
    if codec is None:
        return data
    import lzma

    try:
        with _codec_stream(io.BytesIO(data), codec, "rb") as stream:
            return bytes(stream.read())
    except (OSError, EOFError, ValueError, lzma.LZMAError):
        raise InputError(
            f"cannot decompress {name} ({codec}): the data is truncated or corrupt",
            hint=f"check the file ({_TESTERS[codec]} -t), or decompress it yourself",
        ) from None


def _codec_stream(file: IO[bytes], codec: str, mode: Literal["rb", "wb"]) -> Any:
    """A stream that reads (``mode`` ``rb``) or writes (``wb``) ``file`` through ``codec``
    (gzip at level 6, the gzip tool's default; zstd through pyarrow); closing it leaves
    ``file`` open."""
    import bz2
    import gzip
    import lzma

    if codec == "gzip":
        return gzip.GzipFile(fileobj=file, mode=mode, compresslevel=6)
    if codec == "bz2":
        return bz2.BZ2File(file, mode)
    if codec == "xz":
        return lzma.LZMAFile(file, mode)
    import pyarrow as pa

    stream = pa.CompressedOutputStream if mode == "wb" else pa.CompressedInputStream
    return stream(pa.PythonFile(file, mode=mode[0]), "zstd")


def error_line(text: str) -> str:
    """The first line of a library's error text, for grpo-adv's one-line errors ("unknown
    error" when it has none), terminal colour codes removed."""
    return first_line(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text), "unknown error")


def cannot_read(name: str, fmt: str, cause: str, hint: Message | None = None) -> InputError:
    """The error for ``name`` that cannot be read as ``fmt`` (``cause``: why, first line
    kept); the hint is the format's parse hint unless given."""
    hint = FORMATS[fmt].parse_hint if hint is None else hint
    return InputError(f"cannot read {name} as {fmt}: {error_line(cause)}", hint=hint)


def check_magic(head: bytes, fmt: str, name: str) -> None:
    """Refuse ``head`` (not empty) unless it starts with the magic bytes of ``fmt`` (a
    binary format; a text format has none)."""
    magic = FORMATS[fmt].magic
    if head and magic and not head.startswith(magic):
        shown = " or ".join(m.decode() if m.isalnum() else f"0x{m.hex()}" for m in magic)
        raise cannot_read(name, fmt, f"it does not start with {shown}")


# --------------------------------------------------------------------------- writing


def unknown_suffix(
    path: Path, what: str, formats: Sequence[str], flag: Message | None
) -> OptionsError:
    """The error for an output whose suffix names none of ``formats``: the suffixes that
    do, and ``flag``, the option that names the format (None: the command has none)."""
    *most, last = (FORMATS[fmt].suffixes[0] for fmt in formats)
    hint: Message = f"end the file name with {', '.join(most)} or {last}"
    if flag is not None:
        hint = hint + ", or name the format with " + flag
    return OptionsError(f"cannot tell the {what} format of {path}", hint=hint, path=path)


def output_format_for(path: Path, requested: str | None, fallback: str) -> str:
    """Choose the output format: ``requested`` (checked against the suffix, any suffix
    when the suffix names no format: the user chose), the suffix, or ``fallback`` (usually
    the input's format) for a name without a suffix or a stream (``/dev/stdout``, a FIFO).
    A suffix that names no format (``out.xlsx``, ``out.txt``) is refused."""
    by_suffix = format_from_suffix(path, written=True)
    suffix = uncompressed_name(path).suffix
    if by_suffix is None and requested is None and suffix and not is_stream(path):
        raise unknown_suffix(path, "output", DATA_FORMATS, FORMAT_OPTION)
    if requested is not None:
        if by_suffix is not None and by_suffix != requested:
            raise OptionsError(
                option("output_format", requested) + f" does not match the suffix of {path}",
                hint=f"name the file with {FORMATS[requested].suffixes[0]}, or drop "
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
        suffix = FORMATS[output_fmt].suffixes[0]
    if not FORMATS[output_fmt].binary and plain != input_path:
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
    """``sink`` itself, or a stream that compresses into it with ``codec`` (see
    :func:`_codec_stream`); closing the stream writes the codec's trailer."""
    if codec is None:
        yield sink
        return
    with _codec_stream(sink, codec, "wb") as stream:
        yield stream


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
    fmt = format_from_suffix(path, written=True)
    if fmt is None:
        raise unknown_suffix(path, "table", TABLE_FORMATS, flag)
    return fmt

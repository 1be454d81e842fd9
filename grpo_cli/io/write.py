"""Writing frames and tables in any format of the registry (FORMATS), to a file
(atomically, see :mod:`grpo_cli.io.atomic`) or standard output."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import polars as pl

from grpo_cli.core.errors import (
    Message,
    OutputError,
    is_disk_full,
    option,
)
from grpo_cli.io.atomic import Stage, atomic_write, check_target
from grpo_cli.io.formats import (
    DATA_FORMATS,
    FORMATS,
    describe,
    error_line,
    is_same_file,
    is_stream,
    table_format,
)
from grpo_cli.io.read import OUTPUT


def frame_to_markdown(frame: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (floats to 6 significant digits)."""

    def cell(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return f"{value:.6g}"
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(frame.columns) + " |",
        "|" + "|".join("---" for _ in frame.columns) + "|",
    ]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows())
    return "\n".join(lines) + "\n"


def write_markdown(frame: pl.DataFrame, sink: IO[bytes]) -> None:
    """Markdown's writer (see :class:`grpo_cli.io.formats.Format`)."""
    sink.write(frame_to_markdown(frame).encode())


def write_frame(frame: pl.DataFrame, sink: IO[bytes], fmt: str) -> None:
    """Write ``frame`` to an open binary stream in ``fmt``."""
    try:
        FORMATS[fmt].write(frame, sink)
    except pl.exceptions.PolarsError as exc:
        if "broken pipe" in str(exc).lower():
            # The reader closed the pipe (``| head``): not a failure of ours.
            raise BrokenPipeError(errno.EPIPE, "Broken pipe") from None
        if is_disk_full(exc):
            raise OSError(errno.ENOSPC, "No space left on device") from None
        nested = any(isinstance(t, pl.List | pl.Struct | pl.Array) for t in frame.dtypes)
        whole = [name for name in DATA_FORMATS if FORMATS[name].nested]
        hint: Message = (
            "nested columns need " + option("output_format") + " " + describe(whole)
            if nested and not FORMATS[fmt].nested
            else f"check the output path and its device; {describe(whole, last='and')} write "
            "any column"
        )
        raise OutputError(f"cannot write {fmt}: {error_line(str(exc))}", hint=hint) from None


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
    check_target(path, force=force, exists=path.exists(), flag=flag)


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
    """Write a table to ``path`` (``-``: standard output) in ``fmt`` or its suffix's
    format, which it returns; with ``stage`` (:func:`atomic_writes`), with the others."""
    fmt = table_format(path, fmt)
    if str(path) == "-":
        to_stdout(lambda sink: write_frame(frame, sink, fmt))
        return fmt
    check_output_path(path, force=force, protected=protected, flag=flag)
    if stage is None:
        atomic_write(path, lambda sink: write_frame(frame, sink, fmt), force=force)
    else:
        stage(path, lambda sink: write_frame(frame, sink, fmt))
    return fmt


def to_stdout(write: Callable[[IO[bytes]], None]) -> None:
    """Run ``write`` on standard output, then flush it. A reader that closed the pipe
    (``| head``) ends the data, not the run (:func:`silence`): it goes on and exits 0."""
    sink = sys.stdout.buffer
    try:
        write(sink)
        sink.flush()
    except OSError as exc:
        if not is_broken_pipe(exc):
            raise
        silence(sys.stdout)


def is_broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a pipe whose reader is gone (Polars raises a plain
    ``OSError("Broken pipe (os error 32)")``, with no errno)."""
    return isinstance(exc, OSError) and (
        exc.errno == errno.EPIPE or "broken pipe" in str(exc).lower()
    )


def silence(stream: IO[str]) -> None:
    """Point ``stream`` (a closed pipe) at ``/dev/null``: later writes cannot fail."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)

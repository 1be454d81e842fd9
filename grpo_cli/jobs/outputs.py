"""Where the data comes from and goes: the inputs (or standard input) read, the targets
checked (never an input), the outputs written, what killed runs left removed. Polars is
imported inside the functions (``grpo-adv --help`` stays fast)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.core.columns import SOURCE_KEY
from grpo_cli.core.errors import GrpoAdvError, Message, OptionsError, OutputError, Verbatim, option

if TYPE_CHECKING:
    import polars as pl

    from grpo_cli.core.resolve import Request
    from grpo_cli.io.atomic import Stage
    from grpo_cli.io.read import RewardLog


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _stdin_is_terminal() -> bool:
    return sys.stdin is None or sys.stdin.isatty()


def normalized_format(fmt: str | None) -> str | None:
    """A format name as the core spells it, or None when not given."""
    from grpo_cli.io.formats import normalize_format

    return normalize_format(fmt) if fmt else None


def read_input(
    paths: list[Path],
    fmt: str | None,
    group_cols: tuple[str, ...],
    *,
    source_col: str | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> RewardLog:
    """Read the inputs (:func:`input_paths`) as one log (see
    :func:`grpo_cli.io.read.read_many`); none: standard input, never a terminal."""
    from grpo_cli.io.read import read_many, read_rewards

    fmt = normalized_format(fmt)
    if not paths:
        if _stdin_is_terminal():
            raise OptionsError(
                "no data on standard input (it is a terminal)",
                hint="pipe a log in, e.g. cat rewards.jsonl | grpo-adv compute -",
            )
        return read_rewards(sys.stdin.buffer, fmt, string_cols=group_cols)
    return read_many(paths, fmt, string_cols=group_cols, source_col=source_col, on_file=on_file)


def input_paths(sources: list[str]) -> list[Path]:
    """The input files, folders and globs expanded, once (empty: standard input); no
    output may overwrite one."""
    from grpo_cli.io.read import expand_sources

    if sources == ["-"]:
        return []
    if "-" in sources:
        raise OptionsError(
            "standard input (-) cannot be combined with files", hint="give either - or files"
        )
    return expand_sources(sources)


def output_target(
    sources: list[str], output: str | None, output_format: str | None, input_format: str | None
) -> tuple[Path | None, str | None]:
    """Where the data goes (None: standard output) and in which format (None: the input's,
    known once read: ``input_format`` None is standard input's, only sniffed as it is read)."""
    from grpo_cli.io.formats import default_output_path, normalize_format, output_format_for

    requested = normalize_format(output_format) if output_format else None
    if output == "-" or (output is None and sources == ["-"]):
        return None, requested or input_format
    if output is not None:
        path = Path(output)
        return path, output_format_for(path, requested, input_format or "") or None
    if len(sources) != 1 or Path(sources[0]).is_dir():
        raise OptionsError(
            "several inputs are read as one log: say where it goes",
            hint="give -o PATH (or -o - for standard output)",
        )
    if input_format is None:  # a stream's (:func:`known_format`)
        raise _unknown_format(sources[0])
    fmt = requested or input_format
    return default_output_path(Path(sources[0]), input_format, fmt), fmt


def known_format(given: str | None, paths: list[Path]) -> str | None:
    """The inputs' format before they are read, as the reader will take it: ``given``
    (``--format``), else each file's suffix or, without one, its first bytes (decompressed
    whole in the rare compressed file whose name says no format); several formats read
    as Parquet. None for standard input or a stream without a suffix (a pipe: its bytes
    are read once, by the reader)."""
    from grpo_cli.io.formats import (
        SNIFF_BYTES,
        compression_of,
        decompress,
        format_from_suffix,
        sniff_format,
    )

    if given or not paths:
        return normalized_format(given)
    found = set()
    for path in paths:
        fmt = format_from_suffix(path)
        if fmt is None and not path.is_file():
            return None
        if fmt is None:
            try:
                with path.open("rb") as handle:
                    head = handle.read(SNIFF_BYTES)
                if compression_of(head) is not None:
                    head = decompress(path.read_bytes(), str(path))[:SNIFF_BYTES]
            except OSError:
                head = b""  # the reader says why it cannot read it
            fmt = sniff_format(head)
        found.add(fmt)
    return found.pop() if len(found) == 1 else "parquet"


def _unknown_format(source: str) -> OptionsError:
    """The refusal to name an output after a stream, whose format is known once read."""
    return OptionsError(
        f"cannot tell the format of {source} before reading it (a stream)",
        hint="name it with "
        + option("input_format", Verbatim("FMT"))
        + ", or give "
        + option("output", Verbatim("PATH"), short=True),
    )


@dataclass(frozen=True, kw_only=True)
class Job:
    """One job's request and its inputs and targets, as :func:`run_job` got them
    (:attr:`paths`: the inputs expanded, once)."""

    request: Request
    sources: list[str]
    output: str | None
    out_dir: Path | None
    input_format: str | None
    output_format: str | None
    summary_path: Path | None
    summary_format: str | None
    force: bool
    replace: bool
    span_check: bool
    notes: Callable[[Message], None] | None
    warn: Callable[[Message], None] | None
    fatal: Callable[[GrpoAdvError], None] | None

    @functools.cached_property
    def paths(self) -> list[Path]:
        """The input files (folders and globs expanded); empty for standard input. No
        output may overwrite one."""
        return input_paths(self.sources)


@dataclass(frozen=True)
class Targets:
    """Where a job's data goes, checked: {input index or None (all): (path or None for
    standard output, format)} (a dataset engine: its folder)."""

    outputs: dict[int | None, tuple[Path | None, str | None]]

    @property
    def paths(self) -> tuple[Path, ...]:
        """The output files (or folder); empty for standard output."""
        return tuple(path for path, _ in self.outputs.values() if path is not None)


def plan_targets(job: Job, io: str) -> Targets:
    """Every check of a job's targets, once, before any engine reads, for its engine's
    ``io`` (see :func:`grpo_cli.jobs.run.run_job`): the outputs an engine can write, none
    over an input (ever) or an existing one (without ``force``), the summary apart from
    them; what killed runs left beside them is removed first, whatever this run's fate."""
    from grpo_cli.io.atomic import check_output_folder
    from grpo_cli.io.formats import compression_for
    from grpo_cli.io.write import check_output_path

    output, summary, force, paths = job.output, job.summary_path, job.force, job.paths
    backend = job.request.engine.backend
    if io == "file":
        named = option("backend", backend, alias="alone")
        if len(paths) != 1 or job.out_dir is not None or summary is not None or output == "-":
            raise OptionsError(
                named + " reads one Parquet file and writes one Parquet file",
                hint="give one input file and "
                + option("output", Verbatim("OUT.parquet"), short=True)
                + " (no -, "
                + option("out_dir")
                + " or "
                + option("summary_path")
                + ")",
            )
        target, written = output_target([str(paths[0])], output, job.output_format, "parquet")
        if target is None or written != "parquet" or compression_for(target) is not None:
            raise OptionsError(
                named + " writes Parquet (zstd-compressed inside)",
                hint="give " + option("output", Verbatim("OUT.parquet"), short=True),
            )
        outputs: dict[int | None, tuple[Path | None, str | None]] = {None: (target, written)}
    elif io == "dataset":
        named = option("backend", backend)
        if not paths:
            raise OptionsError(
                named + " reads files, not standard input",
                hint="give the log's files, folders or globs",
            )
        if output is None or output == "-" or job.out_dir is not None:
            raise OptionsError(
                named + " writes a folder of Parquet part files",
                hint="give the folder with " + option("output", Verbatim("OUT_DIR"), short=True),
            )
        if job.output_format not in (None, "parquet"):
            raise OptionsError(
                named + " writes Parquet part files", hint="drop " + option("output_format")
            )
        outputs = {None: (Path(output), "parquet")}
    elif job.out_dir is None:
        fmt = known_format(job.input_format, paths)
        outputs = {None: output_target(job.sources, output, job.output_format, fmt)}
    elif output is not None:
        raise OptionsError(
            "give " + option("output", short=True) + " or " + option("out_dir") + ", not both",
            hint=option("out_dir") + " writes one file per input",
        )
    elif not paths:
        raise OptionsError(option("out_dir") + " needs input files", hint="give files, not -")
    else:
        outputs = _out_dir_targets(job.out_dir, paths, job.input_format, job.output_format)
    targets, to_stdout = Targets(outputs), io != "dataset" and str(summary) == "-"
    remove_leftovers([*targets.paths, None if to_stdout else summary], job.warn)
    check = check_output_folder if io == "dataset" else check_output_path
    for path in targets.paths:
        check(path, force=force, protected=paths)
    if to_stdout and len(targets.paths) < len(outputs):
        raise OptionsError(
            option("summary_path", Verbatim("-"))
            + " and the annotated output both go to standard output",
            hint="write the annotated log to a file with " + option("output", short=True),
        )
    if summary is not None and not to_stdout:
        if any(summary.resolve() == path.resolve() for path in targets.paths):
            raise OutputError(
                option("summary_path")
                + " and "
                + (
                    option("output", short=True) + " are the same folder"
                    if io == "dataset"
                    else "an output are the same file"
                ),
                hint="give them different paths",
                path=summary,
            )
        if io == "dataset":
            check_output_folder(summary, force=force, protected=paths)
        else:
            check_output_path(summary, force=force, protected=paths, flag=option("summary_path"))
    return targets


def _out_dir_targets(
    out_dir: Path, paths: list[Path], input_fmt: str | None, output_format: str | None
) -> dict[int | None, tuple[Path | None, str | None]]:
    """One file per input in ``out_dir`` (created as by ``mkdir -p``), named after it."""
    from grpo_cli.io.formats import default_output_path

    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(
            option("out_dir", Verbatim(str(out_dir))) + " is not a folder",
            hint="choose a folder",
            path=out_dir,
        )
    if not out_dir.exists():
        try:
            out_dir.mkdir(parents=True)  # as mkdir -p: a missing folder is created
        except OSError as exc:
            raise OutputError(
                "cannot create "
                + option("out_dir", Verbatim(str(out_dir)))
                + f": {exc.strerror or exc}",
                hint="check the parent folder's permissions, or choose another folder",
                path=out_dir,
            ) from None
    targets: dict[int | None, tuple[Path | None, str | None]] = {}
    seen: set[Path] = set()
    for index, path in enumerate(paths):
        own = known_format(input_fmt, [path])
        if own is None:
            raise _unknown_format(str(path))
        fmt = normalized_format(output_format) or own
        target = out_dir / default_output_path(path, own, fmt).name
        if target in seen:
            raise OutputError(
                f"two inputs would both be written to {target}",
                hint="inputs with the same name need separate runs",
            )
        seen.add(target)
        targets[index] = (target, fmt)
    return targets


def write_stdout(frame: pl.DataFrame, fmt: str) -> None:
    """Write ``frame`` to standard output (never a binary format to a terminal)."""
    from grpo_cli.io.formats import FORMATS
    from grpo_cli.io.write import to_stdout, write_frame

    if FORMATS[fmt].binary and _stdout_is_terminal():
        raise OptionsError(
            f"refusing to write {fmt.capitalize()} to a terminal",
            hint=f"redirect it (> out{FORMATS[fmt].suffixes[0]}), pipe it, or give -o FILE",
        )
    to_stdout(lambda sink: write_frame(frame, sink, fmt))


def write_outputs(
    frame: pl.DataFrame,
    targets: dict[int | None, tuple[Path | None, str | None]],
    stage: Stage,
    on_written: Callable[[], None],
    read_as: str,
) -> str:
    """Write the whole frame, or each input's rows to its own file (staged: see
    :func:`grpo_cli.io.atomic.atomic_writes`), in the targets' formats (None: ``read_as``,
    the log's); return what to show."""
    import polars as pl

    from grpo_cli.io.write import write_frame

    shown = []
    for index, (path, chosen) in targets.items():
        fmt = chosen or read_as
        part = frame if index is None else frame.filter(pl.col(SOURCE_KEY) == index)
        if SOURCE_KEY in part.columns:
            part = part.drop(SOURCE_KEY)
        if path is None:
            write_stdout(part, fmt)
            shown.append("standard output")
        else:
            stage(path, functools.partial(write_frame, part, fmt=fmt))
            shown.append(f"{path} ({fmt})")
        on_written()
    if len(shown) > 2:
        return f"{len(shown)} files: {shown[0]} ... {shown[-1]}"
    return "; ".join(shown)


def remove_leftovers(targets: list[Path | None], warn: Callable[[str], None] | None) -> None:
    """Remove what killed runs left beside the outputs (their temporary files and spill
    folders; see :func:`grpo_cli.io.temporaries.remove_stale_temporaries`) and say so in one line to
    ``warn`` (None: silently)."""
    from grpo_cli.io.temporaries import remove_stale_temporaries, spill_parent

    folders = dict.fromkeys(spill_parent(path) for path in targets if path is not None)
    for folder in folders:
        removed, size = remove_stale_temporaries(folder)
        if removed and warn is not None:
            names = ", ".join(path.name for path in removed[:3])
            more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
            warn(
                f"removed {len(removed)} leftover(s) of killed grpo-adv runs in {folder} "
                f"({_size_text(size)}): {names}{more}"
            )


def _size_text(size: int) -> str:
    """Bytes for people: ``512 B``, ``3.4 kB``, ``212.0 MB``, ``1.5 GB``."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def sources_or_stdin(sources: list[str] | None) -> list[str]:
    """The INPUT arguments; none given reads standard input when it is a pipe or a file
    (as jq and xsv do), and is a usage error at a terminal."""
    if sources:
        return sources
    if _stdin_is_terminal():
        raise OptionsError(
            "no INPUT given", hint="give a reward log, or pipe one in: cat log.jsonl | grpo-adv ..."
        )
    return ["-"]

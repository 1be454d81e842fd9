"""The ``grpo-adv`` command line: parse options, call the core, render, map errors to exits.

No arithmetic happens here. Polars and Rich are imported inside the commands, so
``grpo-adv --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from grpo_cli import __version__
from grpo_cli import cli_options as opt
from grpo_cli.errors import (
    EXIT_DIFFERENT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_TERMINATED,
    GrpoAdvError,
    OptionsError,
    OutputError,
    Terminated,
)

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console

    from grpo_cli.io import RewardLog, Stage
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.report import Report
    from grpo_cli.summary import RunSummary

app = typer.Typer(
    name="grpo-adv",
    help="Compute, check and explain GRPO group-relative advantages from reward logs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"grpo-adv {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Compute, check and explain GRPO group-relative advantages from reward logs.

    Exit codes: 0 ok, 1 verify found differences, 2 usage, 3 bad input, 4 output refused
    or failed, 70 internal error, 130 interrupted, 143 terminated.
    """


def _is_broken_pipe(exc: BaseException) -> bool:
    # Polars raises a plain OSError("Broken pipe") on a closed stdout, not BrokenPipeError.
    return isinstance(exc, OSError) and (
        exc.errno == errno.EPIPE or "broken pipe" in str(exc).lower()
    )


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the exit flush cannot fail."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Turn core errors into one line plus a hint on stderr and the documented exit code."""
    from grpo_cli.render import print_error, stderr_console

    try:
        yield
    except typer.Exit:
        raise
    except GrpoAdvError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        print_error(stderr_console(), GrpoAdvError("interrupted; no output was written"))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Terminated:
        print_error(stderr_console(), GrpoAdvError("terminated; no output was written"))
        raise typer.Exit(EXIT_TERMINATED) from None
    except OSError as exc:
        if _is_broken_pipe(exc):
            _silence_stdout()
            raise typer.Exit(EXIT_OK) from None
        _internal_error(exc)
    except Exception as exc:
        _internal_error(exc)


def _disk_full_error() -> OutputError:
    """A full disk met outside a file write that names its path: standard output."""
    return OutputError(
        "no space left on device writing standard output",
        hint="free some space where standard output goes, or write elsewhere with -o",
    )


def _internal_error(exc: BaseException) -> NoReturn:
    from grpo_cli.errors import is_disk_full
    from grpo_cli.render import print_error, stderr_console

    if is_disk_full(exc):  # an output error, not a bug
        print_error(stderr_console(), _disk_full_error())
        raise typer.Exit(EXIT_OUTPUT) from None
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    error = GrpoAdvError(
        f"internal error: {type(exc).__name__}: {detail}",
        hint="this is a bug in grpo-adv; please report it with the command you ran",
    )
    print_error(stderr_console(), error)
    raise typer.Exit(EXIT_INTERNAL) from None


def _stdout_binary() -> IO[bytes]:
    return sys.stdout.buffer


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _stdin_is_terminal() -> bool:
    return sys.stdin is None or sys.stdin.isatty()


def _write_stdout(frame: pl.DataFrame, fmt: str) -> None:
    from grpo_cli.io import write_frame

    if fmt == "parquet" and _stdout_is_terminal():
        raise OptionsError(
            "refusing to write Parquet to a terminal",
            hint="redirect it (> out.parquet), pipe it, or give -o FILE",
        )
    sink = _stdout_binary()
    write_frame(frame, sink, fmt)
    sink.flush()


def _read_input(sources: list[str], fmt: str | None, group_cols: tuple[str, ...]) -> RewardLog:
    from grpo_cli.io import normalize_format, read_many, read_rewards

    fmt = normalize_format(fmt) if fmt else None
    if sources == ["-"]:
        if _stdin_is_terminal():
            raise OptionsError(
                "no data on standard input (it is a terminal)",
                hint="pipe a log in, e.g. cat rewards.jsonl | grpo-adv compute -",
            )
        return read_rewards(sys.stdin.buffer, fmt, string_cols=group_cols)
    return read_many(sources, fmt, string_cols=group_cols)


def _output_target(
    sources: list[str], output: str | None, output_format: str | None, input_format: str
) -> tuple[Path | None, str]:
    """Where the data goes (None: standard output) and in which format."""
    from grpo_cli.io import default_output_path, normalize_format, output_format_for

    requested = normalize_format(output_format) if output_format else None
    if output == "-" or (output is None and sources == ["-"]):
        return None, requested or input_format
    if output is not None:
        path = Path(output)
        return path, output_format_for(path, requested, input_format)
    if len(sources) != 1 or Path(sources[0]).is_dir():
        raise OptionsError(
            "several inputs are read as one log: say where it goes",
            hint="give -o PATH (or -o - for standard output)",
        )
    fmt = requested or input_format
    return default_output_path(Path(sources[0]), input_format, fmt), fmt


def _protected_inputs(sources: list[str]) -> list[Path]:
    if sources == ["-"]:
        return []
    from grpo_cli.io import expand_sources

    return expand_sources(sources)


@app.command()
def compute(
    sources: opt.Sources,
    output: opt.Output = None,
    input_format: opt.InputFormat = None,
    output_format: opt.OutputFormat = None,
    preset: opt.Preset = None,
    group_col: opt.GroupCol = None,
    reward_col: opt.RewardCol = None,
    reward_weights: opt.RewardWeights = None,
    aggregation: opt.Aggregation = None,
    estimator: opt.Estimator = None,
    ddof: opt.Ddof = None,
    eps: opt.Eps = None,
    eps_mode: opt.EpsMode = None,
    singleton: opt.Singleton = None,
    nulls: opt.Nulls = None,
    clip: opt.Clip = None,
    clip_stage: opt.ClipStage = None,
    batch_col: opt.BatchCol = None,
    group_size: opt.GroupSize = None,
    length_col: opt.LengthCol = None,
    token_weighted: opt.TokenWeighted = None,
    baseline_col: opt.BaselineCol = None,
    step_rewards_col: opt.StepRewardsCol = None,
    deterministic: opt.Deterministic = None,
    backend: opt.Backend = None,
    device: opt.Device = None,
    with_stats: Annotated[
        bool,
        typer.Option(
            "--with-stats", help="Also output group_size, group_mean and group_std columns."
        ),
    ] = False,
    advantage_col: Annotated[
        str, typer.Option("--advantage-col", metavar="COL", help="Name of the output column.")
    ] = "advantage",
    summary_path: opt.SummaryPath = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out-dir",
            metavar="DIR",
            help="Write one annotated file per input into DIR (the inputs still form one log).",
            show_default=False,
        ),
    ] = None,
    low_memory: Annotated[
        bool,
        typer.Option(
            "--low-memory",
            help="Logs larger than memory: Parquet in, Parquet out, in bounded memory "
            "(spills partitions to a temporary folder beside the output; group-level "
            "estimators only).",
        ),
    ] = False,
    force: opt.Force = False,
    quiet: opt.Quiet = False,
) -> None:
    """Annotate a reward log with group-relative advantages.

    Every input row is kept, in order, with all its columns, plus an `advantage` column.
    """
    with _user_errors():
        explicit = opt.policy_fields(locals())
        if with_stats:
            explicit["with_stats"] = True
        explicit["advantage_col"] = advantage_col
        _compute(
            sources,
            preset,
            explicit,
            output=output,
            out_dir=out_dir,
            low_memory=low_memory,
            input_format=input_format,
            output_format=output_format,
            summary_path=summary_path,
            force=force,
            quiet=quiet,
        )


SOURCE_COL = "__grpo_source"


def _compute(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    *,
    output: str | None,
    out_dir: Path | None,
    low_memory: bool,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    quiet: bool,
) -> None:
    """Check every option, read, compute, write the outputs, then tell the user what
    happened."""
    _check_options(preset, explicit)
    if summary_path is not None:
        from grpo_cli.io import table_format

        table_format(summary_path)
    if low_memory:
        _compute_low_memory(
            sources,
            preset,
            explicit,
            output=output,
            out_dir=out_dir,
            output_format=output_format,
            summary_path=summary_path,
            force=force,
            quiet=quiet,
        )
        return
    from grpo_cli.io import (
        atomic_writes,
        check_output_path,
        expand_sources,
        read_many,
        write_table,
    )
    from grpo_cli.pipeline import annotate
    from grpo_cli.render import DelayedProgress, stderr_console

    if out_dir is not None and output is not None:
        raise OptionsError(
            "give -o or --out-dir, not both", hint="--out-dir writes one file per input"
        )
    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    paths = [] if sources == ["-"] else expand_sources(sources)
    console = stderr_console()
    with DelayedProgress(console, enabled=console.is_terminal and not quiet) as progress:
        reading = progress.add("reading", total=max(len(paths), 1))
        if out_dir is not None:
            if not paths:
                raise OptionsError("--out-dir needs input files", hint="give files, not -")
            fmt = _normalized(input_format)
            log = read_many(
                sources,
                fmt,
                string_cols=key_cols,
                source_col=SOURCE_COL,
                on_file=lambda _: progress.advance(reading),
            )
        else:
            log = _read_input(sources, input_format, key_cols)
            progress.advance(reading, len(paths) or 1)
        targets = _targets(paths, log.format, output, output_format, out_dir, sources)
        protected = _protected_inputs(sources)
        for path, _ in targets.values():
            if path is not None:
                check_output_path(path, force=force, protected=protected)
        if summary_path is not None:
            if any(
                path is not None and summary_path.resolve() == path.resolve()
                for path, _ in targets.values()
            ):
                raise OutputError(
                    "--summary and an output are the same file", hint="give them different paths"
                )
            check_output_path(summary_path, force=force, protected=protected)
        _remove_leftovers(
            console, [path for path, _ in targets.values()] + [summary_path], quiet=quiet
        )
        computing = progress.add("computing", total=1)
        result = annotate(log.frame, preset, **explicit)
        progress.advance(computing)
        writing = progress.add("writing", total=len(targets))
        with atomic_writes() as stage:  # every output lands, or none
            shown_output = _write_outputs(
                result.frame, targets, stage, lambda: progress.advance(writing)
            )
            if summary_path is not None:
                write_table(
                    result.groups, summary_path, force=force, protected=protected, stage=stage
                )
    if not quiet:
        _report(
            console,
            result.run,
            result.options,
            result.warnings,
            preset,
            result.layout,
            shown_output,
            summary_path,
        )


def _check_options(preset: str | None, explicit: dict[str, Any]) -> AdvantageOptions:
    """The options a preset and the explicit choices make, checked before any file is
    read or any output path looked at (an unknown estimator is a usage error, whatever
    the output). The count of --reward-weights is checked once a dump layout has named
    the reward columns."""
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.presets import merge_options

    fields = merge_options(preset, explicit)
    if "reward_cols" not in explicit:
        fields.pop("reward_weights", None)
    return AdvantageOptions(**fields)


def _remove_leftovers(console: Console, targets: list[Path | None], *, quiet: bool) -> None:
    """Remove what killed runs left beside the outputs (their temporary files and spill
    folders; see :func:`grpo_cli.io.remove_stale_temporaries`) and say so in one line."""
    from grpo_cli.io import remove_stale_temporaries, spill_parent

    folders = dict.fromkeys(spill_parent(path) for path in targets if path is not None)
    for folder in folders:
        removed, size = remove_stale_temporaries(folder)
        if removed and not quiet:
            from grpo_cli.render import print_warning

            names = ", ".join(path.name for path in removed[:3])
            more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
            print_warning(
                console,
                f"removed {len(removed)} leftover(s) of killed grpo-adv runs in {folder} "
                f"({_size_text(size)}): {names}{more}",
            )


def _size_text(size: int) -> str:
    """Bytes for people: ``512 B``, ``3.4 kB``, ``212.0 MB``, ``1.5 GB``."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _compute_low_memory(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    *,
    output: str | None,
    out_dir: Path | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    quiet: bool,
) -> None:
    """``--low-memory``: one Parquet file in, one Parquet file out, bounded memory."""
    from grpo_cli.io import (
        atomic_path,
        check_output_path,
        check_parquet_file,
        compression_for,
        expand_sources,
    )
    from grpo_cli.lowmem import annotate_to_parquet, check_low_memory
    from grpo_cli.render import stderr_console

    options = _check_options(preset, explicit)
    check_low_memory(options)

    paths = [] if sources == ["-"] else expand_sources(sources)
    if len(paths) != 1 or out_dir is not None or summary_path is not None or output == "-":
        raise OptionsError(
            "--low-memory reads one Parquet file and writes one Parquet file",
            hint="give one input file and -o OUT.parquet (no -, --out-dir or --summary)",
        )
    source = paths[0]
    from grpo_cli.io import read_rewards

    if not source.is_file():
        read_rewards(source)  # raises the usual missing / folder / permission error
    check_parquet_file(source)
    target, fmt = _output_target([str(source)], output, output_format, "parquet")
    if target is None or fmt != "parquet" or compression_for(target) is not None:
        raise OptionsError(
            "--low-memory writes Parquet (zstd-compressed inside)", hint="give -o OUT.parquet"
        )
    check_output_path(target, force=force, protected=[source])
    console = stderr_console()
    _remove_leftovers(console, [target], quiet=quiet)
    with atomic_path(target) as tmp:
        run = annotate_to_parquet(source, tmp, options)
    if not quiet:
        _report(console, run, options, (), preset, None, f"{target} (parquet)", None)


def _normalized(fmt: str | None) -> str | None:
    from grpo_cli.io import normalize_format

    return normalize_format(fmt) if fmt else None


def _targets(
    paths: list[Path],
    input_format: str,
    output: str | None,
    output_format: str | None,
    out_dir: Path | None,
    sources: list[str],
) -> dict[int | None, tuple[Path | None, str]]:
    """Where each part of the output goes: {input index or None (all): (path or None
    for standard output, format)}."""
    from grpo_cli.io import default_output_path, format_from_suffix

    if out_dir is None:
        return {None: _output_target(sources, output, output_format, input_format)}
    if not out_dir.is_dir():
        raise OutputError(f"--out-dir {out_dir} is not a folder", hint="create it first")
    targets: dict[int | None, tuple[Path | None, str]] = {}
    seen: set[Path] = set()
    for index, path in enumerate(paths):
        own = format_from_suffix(path) or input_format
        fmt = _normalized(output_format) or own
        target = out_dir / default_output_path(path, own, fmt).name
        if target in seen:
            raise OutputError(
                f"two inputs would both be written to {target}",
                hint="inputs with the same name need separate runs",
            )
        seen.add(target)
        targets[index] = (target, fmt)
    return targets


def _write_outputs(
    frame: pl.DataFrame,
    targets: dict[int | None, tuple[Path | None, str]],
    stage: Stage,
    on_written: Callable[[], None],
) -> str:
    """Write the whole frame, or each input's rows to its own file (staged: see
    :func:`grpo_cli.io.atomic_writes`); return what to show."""
    import polars as pl

    shown = []
    for index, (path, fmt) in targets.items():
        part = frame if index is None else frame.filter(pl.col(SOURCE_COL) == index)
        if SOURCE_COL in part.columns:
            part = part.drop(SOURCE_COL)
        if path is None:
            _write_stdout(part, fmt)
            shown.append("standard output")
        else:
            stage(path, functools.partial(_write_part, part, fmt))
            shown.append(f"{path} ({fmt})")
        on_written()
    if len(shown) > 2:
        return f"{len(shown)} files: {shown[0]} ... {shown[-1]}"
    return "; ".join(shown)


def _write_part(frame: pl.DataFrame, fmt: str, sink: IO[bytes]) -> None:
    from grpo_cli.io import write_frame

    write_frame(frame, sink, fmt)


def _report(
    console: Console,
    run: RunSummary,
    options: AdvantageOptions,
    warnings: tuple[str, ...],
    preset: str | None,
    layout: str | None,
    output: str,
    summary_path: Path | None,
) -> None:
    """Warnings and the summary table on stderr."""
    from grpo_cli.render import print_warning, render_run_summary

    for warning in warnings:
        print_warning(console, warning)
    if run.null_rewards:
        fate = {"exclude": "their advantage is null", "zero": "their advantage is 0"}.get(
            options.nulls, ""
        )
        print_warning(
            console,
            f"{run.null_rewards} null or NaN reward(s): left out of the statistics; {fate}",
        )
    render_run_summary(
        console,
        run,
        options,
        output=output,
        group_table_path=None if summary_path is None else str(summary_path),
        preset=preset,
        layout=layout,
    )


@app.command()
def verify(
    sources: opt.Sources,
    preset: opt.Preset = None,
    advantage_col: Annotated[
        str,
        typer.Option(
            "--advantage-col", metavar="COL", help="The logged advantage column to check."
        ),
    ] = "advantage",
    tol: Annotated[
        float,
        typer.Option(
            "--tol",
            metavar="FLOAT",
            help="Largest absolute difference that still agrees (float32 trainers: ~1e-5).",
        ),
    ] = 1e-5,
    top: Annotated[
        int, typer.Option("--top", metavar="N", help="How many of the worst groups to show.")
    ] = 5,
    input_format: opt.InputFormat = None,
    group_col: opt.GroupCol = None,
    reward_col: opt.RewardCol = None,
    reward_weights: opt.RewardWeights = None,
    aggregation: opt.Aggregation = None,
    estimator: opt.Estimator = None,
    ddof: opt.Ddof = None,
    eps: opt.Eps = None,
    eps_mode: opt.EpsMode = None,
    singleton: opt.Singleton = None,
    nulls: opt.Nulls = None,
    clip: opt.Clip = None,
    clip_stage: opt.ClipStage = None,
    batch_col: opt.BatchCol = None,
    group_size: opt.GroupSize = None,
    length_col: opt.LengthCol = None,
    token_weighted: opt.TokenWeighted = None,
    baseline_col: opt.BaselineCol = None,
    step_rewards_col: opt.StepRewardsCol = None,
    deterministic: opt.Deterministic = None,
    backend: opt.Backend = None,
    device: opt.Device = None,
    quiet: opt.Quiet = False,
) -> None:
    """Recompute advantages and compare them with a logged advantage column.

    Exits 0 when every row agrees within --tol, 1 when some do not.
    """
    with _user_errors():
        from grpo_cli.render import print_warning, render_verify_report, stderr_console
        from grpo_cli.verify import verify_advantages

        explicit = opt.policy_fields(locals())
        key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
        log = _read_input(sources, input_format, key_cols)
        report = verify_advantages(
            log.frame,
            preset,
            advantage_col=advantage_col,
            tol=tol,
            top=top,
            warn=not quiet,
            **explicit,
        )
        if not quiet:
            console = stderr_console()
            for warning in report.warnings:
                print_warning(console, warning)
            render_verify_report(console, report, preset=preset, source=log.source)
    if not report.agree:
        raise typer.Exit(EXIT_DIFFERENT)


def _report_for(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    input_format: str | None,
    by: list[str] | None,
) -> Report:
    """Read the inputs and build the summarize report."""
    from grpo_cli.pipeline import resolve
    from grpo_cli.report import summarize as summarize_log

    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    log = _read_input(sources, input_format, key_cols)
    resolved = resolve(log.frame, preset, explicit)
    return summarize_log(resolved.frame, resolved.options, tuple(by) if by else None)


@app.command()
def summarize(
    sources: opt.Sources,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write the --level table; format from the suffix: .csv, .parquet, .json, "
            ".jsonl or .md.",
            show_default=False,
        ),
    ] = None,
    level: Annotated[
        str | None,
        typer.Option(
            "--level",
            metavar="LEVEL",
            help="Table written by -o: step, group or overall. Default: step when there is "
            "a per-step column, else overall.",
            show_default=False,
        ),
    ] = None,
    by: opt.By = None,
    rows: Annotated[
        int, typer.Option("--rows", metavar="N", help="Steps shown on the terminal.")
    ] = 20,
    input_format: opt.InputFormat = None,
    preset: opt.Preset = None,
    group_col: opt.GroupCol = None,
    reward_col: opt.RewardCol = None,
    reward_weights: opt.RewardWeights = None,
    ddof: opt.Ddof = None,
    nulls: opt.Nulls = None,
    batch_col: opt.BatchCol = None,
    group_size: opt.GroupSize = None,
    advantage_col: Annotated[
        str,
        typer.Option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its metrics are added).",
        ),
    ] = "advantage",
    force: opt.Force = False,
    quiet: opt.Quiet = False,
) -> None:
    """Metrics per step, per group and overall, under the trainers' names.

    Works on raw and annotated logs (the advantage metrics need the advantage column).
    """
    with _user_errors():
        from grpo_cli.render import print_warning, render_report, stderr_console

        explicit = opt.report_fields(locals())
        report = _report_for(sources, preset, explicit, input_format, by)
        chosen = level or ("step" if report.by else "overall")
        table = report.table(chosen)
        if output is not None:
            from grpo_cli.io import write_table

            _remove_leftovers(stderr_console(), [output], quiet=quiet)
            write_table(table, output, force=force, protected=_protected_inputs(sources))
        if not quiet:
            console = stderr_console()
            for warning in report.warnings:
                print_warning(console, warning)
            render_report(console, report, rows=rows)
            if output is not None:
                console.print(f"{chosen} table ({table.height:,} rows) written to {output}")


@app.command()
def plot(
    sources: opt.Sources,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="The dashboard: .png, .svg or .html.",
            show_default=False,
        ),
    ],
    by: opt.By = None,
    input_format: opt.InputFormat = None,
    preset: opt.Preset = None,
    group_col: opt.GroupCol = None,
    reward_col: opt.RewardCol = None,
    reward_weights: opt.RewardWeights = None,
    nulls: opt.Nulls = None,
    batch_col: opt.BatchCol = None,
    group_size: opt.GroupSize = None,
    advantage_col: Annotated[
        str,
        typer.Option("--advantage-col", metavar="COL", help="The advantage column, if any."),
    ] = "advantage",
    force: opt.Force = False,
    quiet: opt.Quiet = False,
) -> None:
    """Draw a dashboard: advantage and reward histograms, per-step curves.

    Needs the plot extra: pip install 'grpo-adv[plot]'.
    """
    with _user_errors():
        from grpo_cli.io import check_output_path
        from grpo_cli.plot import check_plot_path, write_dashboard

        fmt = check_plot_path(output)
        check_output_path(output, force=force, protected=_protected_inputs(sources))
        explicit = opt.report_fields(locals())
        report = _report_for(sources, preset, explicit, input_format, by)
        from grpo_cli.render import stderr_console

        _remove_leftovers(stderr_console(), [output], quiet=quiet)
        write_dashboard(report, output, fmt, title=", ".join(sources))
        if not quiet:
            stderr_console().print(f"dashboard written to {output}")


@app.command()
def explain(
    sources: opt.Sources,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            metavar="KEY",
            help="The group's key value (comma-separated for a composite key). Positional "
            "groups (--group-size) are keyed BATCH,GROUP_INDEX, e.g. 3,0 for the first run "
            "of G rows of step 3 (GROUP_INDEX alone without a batch column); a verl dump's "
            "by its uid.",
            show_default=False,
        ),
    ],
    input_format: opt.InputFormat = None,
    preset: opt.Preset = None,
    group_col: opt.GroupCol = None,
    reward_col: opt.RewardCol = None,
    reward_weights: opt.RewardWeights = None,
    aggregation: opt.Aggregation = None,
    estimator: opt.Estimator = None,
    ddof: opt.Ddof = None,
    eps: opt.Eps = None,
    eps_mode: opt.EpsMode = None,
    singleton: opt.Singleton = None,
    nulls: opt.Nulls = None,
    clip: opt.Clip = None,
    clip_stage: opt.ClipStage = None,
    batch_col: opt.BatchCol = None,
    group_size: opt.GroupSize = None,
    length_col: opt.LengthCol = None,
    token_weighted: opt.TokenWeighted = None,
    baseline_col: opt.BaselineCol = None,
    step_rewards_col: opt.StepRewardsCol = None,
    deterministic: opt.Deterministic = None,
    advantage_col: Annotated[
        str,
        typer.Option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its values are shown beside).",
        ),
    ] = "advantage",
) -> None:
    """Show one group's advantages with the formula filled in.

    Prints the rewards, n, mean, the std (ddof stated), eps, and each response's
    advantage as the formula with numbers, for the chosen estimator or preset.
    """
    with _user_errors():
        from grpo_cli.explain import explain_one
        from grpo_cli.render import render_explanation, stderr_console

        explicit = opt.explicit_fields(
            group_col=group_col,
            reward_col=reward_col,
            reward_weights=reward_weights,
            aggregation=aggregation,
            estimator=estimator,
            ddof=ddof,
            eps=eps,
            eps_mode=eps_mode,
            singleton=singleton,
            nulls=nulls,
            clip=clip,
            clip_stage=clip_stage,
            batch_col=batch_col,
            group_size=group_size,
            length_col=length_col,
            token_weighted=token_weighted,
            baseline_col=baseline_col,
            step_rewards_col=step_rewards_col,
            deterministic=deterministic,
            advantage_col=advantage_col,
        )
        key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
        log = _read_input(sources, input_format, key_cols)
        explanation = explain_one(log.frame, preset, explicit, group)
        render_explanation(stderr_console(), explanation)


@app.command()
def presets(
    output_format: Annotated[
        str,
        typer.Option(
            "--format", metavar="FORMAT", help="table (the terminal) or markdown (for docs)."
        ),
    ] = "table",
) -> None:
    """List the trainer presets and the conventions each one sets."""
    with _user_errors():
        from grpo_cli.presets import presets_frame
        from grpo_cli.render import render_presets

        if output_format == "markdown":
            from grpo_cli.io import frame_to_markdown

            typer.echo(frame_to_markdown(presets_frame()), nl=False)
        elif output_format == "table":
            from rich.console import Console

            render_presets(Console(soft_wrap=False))
        else:
            raise OptionsError(
                f"unknown --format {output_format!r}", hint="choose table or markdown"
            )


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main() -> None:
    """Console-script entry point. SIGTERM unwinds like Ctrl-C: temporary files are removed
    and no partial output is left."""
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

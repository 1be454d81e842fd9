"""The ``grpo-adv`` command line: parse options, call the core, render, map errors to exits.

No arithmetic happens here. Polars and Rich are imported inside the commands, so
``grpo-adv --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from grpo_cli import __version__
from grpo_cli.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    GrpoAdvError,
    OptionsError,
    OutputError,
)
from grpo_cli.estimators import ESTIMATORS
from grpo_cli.options import SINGLETON_POLICIES

if TYPE_CHECKING:
    import polars as pl

    from grpo_cli.io import RewardLog
    from grpo_cli.options import AdvantageOptions

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

    Exit codes: 0 ok, 1 internal error, 2 usage, 3 bad input, 4 output refused or failed,
    130 interrupted.
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
    except GrpoAdvError as exc:
        print_error(stderr_console(), exc)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        print_error(stderr_console(), GrpoAdvError("interrupted; no output was written"))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except OSError as exc:
        if _is_broken_pipe(exc):
            _silence_stdout()
            raise typer.Exit(EXIT_OK) from None
        raise


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


def _read_input(source: str, fmt: str | None, group_cols: tuple[str, ...]) -> RewardLog:
    from grpo_cli.io import read_rewards

    if source == "-":
        if _stdin_is_terminal():
            raise OptionsError(
                "no data on standard input (it is a terminal)",
                hint="pipe a log in, e.g. cat rewards.jsonl | grpo-adv compute -",
            )
        return read_rewards(sys.stdin.buffer, fmt, string_cols=group_cols)
    return read_rewards(source, fmt, string_cols=group_cols)


_ESTIMATOR_HELP = "Advantage estimator: " + "; ".join(
    f"{e.name} = {e.summary}" for e in ESTIMATORS.values()
)
_SINGLETON_HELP = "What a group with one valid reward gets: " + "; ".join(
    f"{name} = {text}" for name, text in SINGLETON_POLICIES.items()
)


@app.command()
def compute(
    source: Annotated[
        str,
        typer.Argument(
            metavar="INPUT",
            help="Reward log: .parquet, .csv, .jsonl/.ndjson or .json; - reads standard input.",
            show_default=False,
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Output file, or - for standard output. Default: <stem>.adv.<suffix> beside "
            "INPUT; standard output when INPUT is -.",
            show_default=False,
        ),
    ] = None,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="Input format: parquet, csv, jsonl or json. Default: from the suffix, "
            "else from the content.",
            show_default=False,
        ),
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            metavar="FORMAT",
            help="Output format: parquet, csv, jsonl or json. Default: from -o's suffix, "
            "else the input's format.",
            show_default=False,
        ),
    ] = None,
    group_col: Annotated[
        list[str] | None,
        typer.Option(
            "--group-col",
            "-g",
            metavar="COL",
            help="Column identifying a group; repeat for a composite key "
            "(-g step -g prompt_id). Default: prompt_id.",
            show_default=False,
        ),
    ] = None,
    reward_col: Annotated[
        str, typer.Option("--reward-col", "-r", metavar="COL", help="Numeric reward column.")
    ] = "reward",
    estimator: Annotated[
        str, typer.Option("--estimator", metavar="NAME", help=_ESTIMATOR_HELP)
    ] = "grpo",
    ddof: Annotated[
        int,
        typer.Option(
            "--ddof",
            metavar="0|1",
            help="Std degrees-of-freedom correction: 1 sample, 0 population.",
        ),
    ] = 1,
    eps: Annotated[
        float, typer.Option("--eps", metavar="FLOAT", help="Added to the group std.")
    ] = 1e-8,
    singleton: Annotated[
        str, typer.Option("--singleton", metavar="POLICY", help=_SINGLETON_HELP)
    ] = "zero",
    with_stats: Annotated[
        bool,
        typer.Option(
            "--with-stats", help="Also output group_size, group_mean and group_std columns."
        ),
    ] = False,
    advantage_col: Annotated[
        str,
        typer.Option("--advantage-col", metavar="COL", help="Name of the output advantage column."),
    ] = "advantage",
    summary_path: Annotated[
        Path | None,
        typer.Option(
            "--summary",
            metavar="PATH",
            help="Write the per-group table here (.csv, .parquet, .jsonl, .json or .md).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite existing output files.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing on stderr but errors.")
    ] = False,
) -> None:
    """Annotate a reward log with group-relative advantages.

    Every input row is kept, in order, with all its columns, plus an `advantage` column.
    """
    with _user_errors():
        from grpo_cli.options import AdvantageOptions

        options = AdvantageOptions(
            group_cols=tuple(group_col or ("prompt_id",)),
            reward_col=reward_col,
            estimator=estimator,
            ddof=ddof,
            eps=eps,
            singleton=singleton,
            with_stats=with_stats,
            advantage_col=advantage_col,
        )
        _compute(
            source,
            options,
            output=output,
            input_format=input_format,
            output_format=output_format,
            summary_path=summary_path,
            force=force,
            quiet=quiet,
        )


def _compute(
    source: str,
    options: AdvantageOptions,
    *,
    output: str | None,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    quiet: bool,
) -> None:
    """Read, compute, write the outputs, then tell the user what happened."""
    from grpo_cli.compute import compute_advantages
    from grpo_cli.io import (
        atomic_write,
        check_output_path,
        default_output_path,
        normalize_format,
        output_format_for,
        write_frame,
        write_table,
    )
    from grpo_cli.render import print_warning, render_run_summary, stderr_console
    from grpo_cli.summary import group_table, summarize_run

    in_fmt = normalize_format(input_format) if input_format else None
    out_fmt_requested = normalize_format(output_format) if output_format else None
    input_path = None if source == "-" else Path(source)
    protected = [input_path] if input_path is not None else []

    log = _read_input(source, in_fmt, options.group_cols)

    # Where the data goes: a file (atomic) or standard output.
    out_path: Path | None
    if output == "-" or (output is None and input_path is None):
        out_path = None
        out_fmt = out_fmt_requested or log.format
    elif output is None:
        assert input_path is not None
        out_fmt = out_fmt_requested or log.format
        out_path = default_output_path(input_path, log.format, out_fmt)
    else:
        out_path = Path(output)
        out_fmt = output_format_for(out_path, out_fmt_requested, log.format)
    if out_path is not None:
        check_output_path(out_path, force=force, protected=protected)
    if summary_path is not None:
        if out_path is not None and summary_path.resolve() == out_path.resolve():
            raise OutputError(
                "--summary and the output are the same file", hint="give them different paths"
            )
        check_output_path(summary_path, force=force, protected=protected)

    annotated = compute_advantages(log.frame, options)
    groups = group_table(annotated, options)
    run = summarize_run(annotated, groups, options)

    if out_path is None:
        _write_stdout(annotated, out_fmt)
        shown_output = "standard output"
    else:
        atomic_write(out_path, lambda sink: write_frame(annotated, sink, out_fmt))
        shown_output = f"{out_path} ({out_fmt})"
    if summary_path is not None:
        write_table(groups, summary_path, force=force, protected=protected)

    console = stderr_console()
    if run.null_rewards and not quiet:
        nan_part = f", {run.nan_rewards} of them NaN" if run.nan_rewards else ""
        print_warning(
            console,
            f"{run.null_rewards} null reward(s){nan_part}: left out of their group's "
            "statistics; their advantage is null",
        )
    if not quiet:
        shown_table = None if summary_path is None else str(summary_path)
        render_run_summary(console, run, options, shown_output, shown_table)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

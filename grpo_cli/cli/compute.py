"""``grpo-adv compute``: annotate a reward log with group-relative advantages."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from grpo_cli.cli.help import ENGINE, INPUT, OUTPUT
from grpo_cli.cli.params import (
    Force,
    InputFormat,
    Output,
    OutputFormat,
    PolicyParams,
    Preset,
    Quiet,
    Sources,
    SummaryFormat,
    SummaryPath,
    alias_backend,
    cli_option,
    flag_spelling,
    policy_options,
)

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.jobs.run import JobResult


@policy_options()
def compute_cmd(
    sources: Sources = None,
    output: Output = None,
    input_format: InputFormat = None,
    output_format: OutputFormat = None,
    preset: Preset = None,
    *,
    policy: PolicyParams,
    with_stats: Annotated[
        bool,
        cli_option(
            "--with-stats",
            help="Also output group_size, group_mean and group_std columns.",
            panel=OUTPUT,
        ),
    ] = False,
    advantage_col: Annotated[
        str,
        cli_option(
            "--advantage-col",
            metavar="COL",
            help="Name of the output column.",
            panel=INPUT,
            show_default=True,
        ),
    ] = "advantage",
    replace: Annotated[
        bool,
        cli_option(
            "--replace",
            help="Recompute input columns named like the added ones (a trainer dump's own "
            "advantage column) in place, instead of refusing.",
            panel=OUTPUT,
        ),
    ] = False,
    summary_path: SummaryPath = None,
    summary_format: SummaryFormat = None,
    out_dir: Annotated[
        Path | None,
        cli_option(
            "--out-dir",
            metavar="DIR",
            help="Write one annotated file per input into DIR (the inputs still form one log).",
            panel=OUTPUT,
        ),
    ] = None,
    low_memory: Annotated[
        bool,
        cli_option(
            "--low-memory",
            help="Logs larger than memory: Parquet in, Parquet out, in bounded memory "
            "(spills partitions to a temporary folder beside the output; group-level "
            f"estimators only). The same as --backend {alias_backend('--low-memory', {})}.",
            panel=ENGINE,
        ),
    ] = False,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Annotate a reward log with group-relative advantages.

    Every input row is kept, in order, with all its columns, plus an `advantage` column.
    """
    from grpo_cli.cli.render import DelayedProgress, print_error, print_note, stderr_console, warner
    from grpo_cli.jobs.outputs import sources_or_stdin
    from grpo_cli.jobs.run import run_job

    explicit = policy.explicit()
    if with_stats:
        explicit["with_stats"] = True
    explicit["advantage_col"] = advantage_col
    if low_memory:
        explicit["backend"] = alias_backend("--low-memory", explicit)
    console = stderr_console()
    enabled = console.is_terminal and not quiet
    result = run_job(
        sources_or_stdin(sources),
        output,
        preset=preset,
        options=explicit,  # the engine settings among them: run_job splits them off
        replace=replace,
        out_dir=out_dir,
        input_format=input_format,
        output_format=output_format,
        summary_path=summary_path,
        summary_format=summary_format,
        force=force,
        span_check=not quiet,
        progress=lambda: DelayedProgress(console, enabled=enabled),
        notes=None if quiet else functools.partial(print_note, console, spell=flag_spelling),
        warn=warner(quiet=quiet),
        fatal=functools.partial(print_error, console, spell=flag_spelling),
    )
    if not quiet:
        _report(console, result, preset)


def _report(console: Console, result: JobResult, preset: str | None) -> None:
    """Warnings and the summary table on stderr."""
    from grpo_cli.cli.render import print_warning, print_warnings, render_run_summary

    run, options = result.run, result.options
    print_warnings(console, result.warnings)
    if run.null_rewards:
        fate = {"exclude": "their advantage is null", "zero": "their advantage is 0"}.get(
            options.nulls, ""
        )
        print_warning(
            console,
            f"{run.null_rewards:,} null or NaN reward(s): left out of the statistics; {fate}",
            flag_spelling,
        )
    render_run_summary(console, result, preset=preset)

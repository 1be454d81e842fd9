"""``grpo-adv plot``: draw a dashboard (needs the plot extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from grpo_cli.cli.help import INPUT, OUTPUT, POLICIES
from grpo_cli.cli.params import (
    By,
    Force,
    InputFormat,
    Preset,
    Quiet,
    ReportParams,
    Sources,
    cli_option,
    flag_spelling,
    report_options,
)
from grpo_cli.core.estimators import ESTIMATORS


@report_options(exclude={"ddof"})  # plot has never taken --ddof
def plot_cmd(
    sources: Sources = None,
    output: Annotated[
        Path | None,
        cli_option(
            "--output",
            "-o",
            metavar="PATH",
            help="The dashboard: .png, .svg, .pdf or .html, by suffix. Default: "
            "<stem>.report.png beside the input file.",
            panel=OUTPUT,
        ),
    ] = None,
    by: By = None,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    report_params: ReportParams,
    advantage_col: Annotated[
        str | None,
        cli_option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column, if any. Default: advantage, else advantages (verl).",
            panel=INPUT,
        ),
    ] = None,
    estimator: Annotated[
        str | None,
        cli_option(
            "--estimator",
            "-e",
            metavar="NAME",
            help="The estimator the advantages came from, named in the title (the report "
            "does not depend on it). Default: the preset's, else grpo.",
            complete=ESTIMATORS,
            panel=POLICIES,
        ),
    ] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Draw a dashboard: advantage and reward histograms, per-step curves.

    PNG, SVG, PDF or HTML (the figure and the tables); without -o, <stem>.report.png
    beside the input. Needs matplotlib: .venv/bin/pip install -e '.[plot]' (make adds it).
    """
    from grpo_cli.cli.render import print_warnings, progress_shown, stderr_console, warner
    from grpo_cli.report.plot import run_plot

    with progress_shown(quiet=quiet):
        result = run_plot(
            sources or [],
            output,
            preset=preset,
            options={**report_params.explicit(), "advantage_col": advantage_col},  # None: detected
            by=by,
            estimator=estimator,
            input_format=input_format,
            force=force,
            warn=warner(quiet=quiet),
            spell=flag_spelling,
        )
    if not quiet:
        console = stderr_console()
        print_warnings(console, result.report.warnings)
        console.print(f"dashboard written to {result.path}")

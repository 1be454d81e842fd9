"""``grpo-adv plot``: draw a dashboard (needs the plot extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.outputs import remove_leftovers
from grpo_cli.cli.params import (
    By,
    Force,
    InputFormat,
    Preset,
    Quiet,
    ReportParams,
    Sources,
    _completes,
    flag_spelling,
    report_options,
)
from grpo_cli.cli.summarize import report_for
from grpo_cli.estimators import ESTIMATORS, get_estimator
from grpo_cli.outputs import protected_inputs, sources_or_stdin


@report_options(exclude={"ddof"})  # plot has never taken --ddof
def plot_cmd(
    sources: Sources = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="The dashboard: .png, .svg, .pdf or .html, by suffix. Default: "
            "<stem>.report.png beside the input file.",
            show_default=False,
        ),
    ] = None,
    by: By = None,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    report_params: ReportParams,
    advantage_col: Annotated[
        str | None,
        typer.Option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column, if any. Default: advantage, else advantages (verl).",
            show_default=False,
        ),
    ] = None,
    estimator: Annotated[
        str | None,
        typer.Option(
            "--estimator",
            "-e",
            metavar="NAME",
            help="The estimator the advantages came from, named in the title (the report "
            "does not depend on it). Default: the preset's, else grpo.",
            autocompletion=_completes(lambda: ESTIMATORS),
            show_default=False,
        ),
    ] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Draw a dashboard: advantage and reward histograms, per-step curves.

    PNG, SVG, PDF or HTML (the figure and the tables); without -o, <stem>.report.png
    beside the input. Needs the plot extra: pip install 'grpo-adv[plot]'.
    """
    from grpo_cli.io import check_output_path
    from grpo_cli.plot import (
        check_plot_path,
        dashboard_title,
        default_plot_path,
        preload_pyplot,
        write_dashboard,
    )

    sources = sources_or_stdin(sources)
    if output is None:
        output = default_plot_path(sources)
    fmt = check_plot_path(output)
    if estimator is not None:
        get_estimator(estimator)  # an unknown name fails before any input is read
    from grpo_cli.render import stderr_console

    remove_leftovers([output], quiet=quiet)  # whatever this run's fate
    check_output_path(output, force=force, protected=protected_inputs(sources))
    preload_pyplot()  # while the log is read and summarized
    explicit = {**report_params.explicit(), "advantage_col": advantage_col}  # None: detected
    report = report_for(sources, preset, explicit, input_format, by)
    title = dashboard_title(sources, preset=preset, estimator=estimator)
    write_dashboard(
        report,
        output,
        fmt,
        title=title,
        methods=report.methods or None,
        force=force,
        spell=flag_spelling,
    )
    if not quiet:
        stderr_console().print(f"dashboard written to {output}")

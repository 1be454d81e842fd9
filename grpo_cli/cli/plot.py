"""``grpo-adv plot``: draw a dashboard (needs the plot extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.outputs import protected_inputs, remove_leftovers, sources_or_stdin
from grpo_cli.cli.params import (
    By,
    Force,
    InputFormat,
    Preset,
    Quiet,
    ReportParams,
    Sources,
    report_options,
)
from grpo_cli.cli.summarize import report_for


@report_options(exclude={"ddof"})  # plot has never taken --ddof
def plot_cmd(
    sources: Sources,
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
    by: By = None,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    report_params: ReportParams,
    advantage_col: Annotated[
        str,
        typer.Option("--advantage-col", metavar="COL", help="The advantage column, if any."),
    ] = "advantage",
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Draw a dashboard: advantage and reward histograms, per-step curves.

    Needs the plot extra: pip install 'grpo-adv[plot]'.
    """
    from grpo_cli.io import check_output_path
    from grpo_cli.plot import check_plot_path, write_dashboard

    sources = sources_or_stdin(sources)
    fmt = check_plot_path(output)
    check_output_path(output, force=force, protected=protected_inputs(sources))
    explicit = {**report_params.explicit(), "advantage_col": advantage_col}
    report = report_for(sources, preset, explicit, input_format, by)
    from grpo_cli.render import stderr_console

    remove_leftovers(stderr_console(), [output], quiet=quiet)
    write_dashboard(report, output, fmt, title=", ".join(sources))
    if not quiet:
        stderr_console().print(f"dashboard written to {output}")

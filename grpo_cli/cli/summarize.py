"""``grpo-adv summarize``: metrics per step, per group and overall."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from grpo_cli.cli.help import INPUT, LAYOUT, OUTPUT
from grpo_cli.cli.params import (
    By,
    Force,
    InputFormat,
    Preset,
    Quiet,
    ReportParams,
    Sources,
    cli_option,
    report_options,
)
from grpo_cli.io.formats import TABLE_FORMATS, describe


@report_options()
def summarize_cmd(
    sources: Sources = None,
    output: Annotated[
        Path | None,
        cli_option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write the --level table (- for standard output); format from the suffix: "
            f"{describe(TABLE_FORMATS, suffixes=True)}, or --output-format.",
            panel=OUTPUT,
        ),
    ] = None,
    output_format: Annotated[
        str | None,
        cli_option(
            "--output-format",
            metavar="FORMAT",
            help=f"Format of the -o table: {describe(TABLE_FORMATS)}. Default: from "
            "-o's suffix; csv for standard output.",
            panel=OUTPUT,
        ),
    ] = None,
    level: Annotated[
        str | None,
        cli_option(
            "--level",
            metavar="LEVEL",
            help="Table written by -o: step, group or overall. Default: step when there is "
            "a per-step column, else overall.",
            panel=LAYOUT,
        ),
    ] = None,
    by: By = None,
    rows: Annotated[
        int,
        cli_option(
            "--rows",
            metavar="N",
            help="Steps shown on the terminal.",
            panel=OUTPUT,
            show_default=True,
        ),
    ] = 20,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    report_params: ReportParams,
    advantage_col: Annotated[
        str | None,
        cli_option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its metrics are added). "
            "Default: advantage, else advantages (verl).",
            panel=INPUT,
        ),
    ] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Metrics per step, per group and overall, under the trainers' names.

    Works on raw and annotated logs (the advantage metrics need the advantage column).
    """
    from grpo_cli.cli.render import (
        print_warnings,
        progress_shown,
        render_report,
        stderr_console,
        warner,
    )
    from grpo_cli.report.summarize import run_summarize

    with progress_shown(quiet=quiet):
        result = run_summarize(
            sources or [],
            output,
            preset=preset,
            options={**report_params.explicit(), "advantage_col": advantage_col},
            by=by,
            level=level,
            input_format=input_format,
            output_format=output_format,
            force=force,
            warn=warner(quiet=quiet),
        )
    if not quiet:
        console = stderr_console()
        print_warnings(console, result.report.warnings)
        render_report(console, result.report, rows=rows)
        if result.written is not None and result.table is not None:
            console.print(
                f"{result.level} table ({result.table.height:,} rows) written to {result.written}"
            )

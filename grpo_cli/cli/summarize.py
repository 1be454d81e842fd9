"""``grpo-adv summarize``: metrics per step, per group and overall."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    flag_spelling,
    report_options,
)
from grpo_cli.outputs import protected_inputs, read_input, sources_or_stdin

if TYPE_CHECKING:
    from grpo_cli.report import Report


@report_options()
def summarize_cmd(
    sources: Sources = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write the --level table (- for standard output); format from the suffix: "
            ".csv, .parquet, .json, .jsonl or .md, or --output-format.",
            show_default=False,
        ),
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            metavar="FORMAT",
            help="Format of the -o table: csv, parquet, jsonl, json or md. Default: from "
            "-o's suffix; csv for standard output.",
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
    by: By = None,
    rows: Annotated[
        int, typer.Option("--rows", metavar="N", help="Steps shown on the terminal.")
    ] = 20,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    report_params: ReportParams,
    advantage_col: Annotated[
        str | None,
        typer.Option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its metrics are added). "
            "Default: advantage, else advantages (verl).",
            show_default=False,
        ),
    ] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Metrics per step, per group and overall, under the trainers' names.

    Works on raw and annotated logs (the advantage metrics need the advantage column).
    """
    from grpo_cli.render import print_warning, render_report, stderr_console

    sources = sources_or_stdin(sources)
    explicit = {**report_params.explicit(), "advantage_col": advantage_col}
    to_stdout = output is not None and str(output) == "-"
    if output is not None:
        from grpo_cli.io import table_format

        table_format(output, output_format)  # before any input is read
    report = under_trainer_names(report_for(sources, preset, explicit, input_format, by), preset)
    chosen = level or ("step" if report.by else "overall")
    table = report.table(chosen) if output is not None or level is not None else None
    if output is not None:
        from grpo_cli.io import write_table

        assert table is not None

        if not to_stdout:
            remove_leftovers([output], quiet=quiet)
        write_table(
            table, output, force=force, protected=protected_inputs(sources), fmt=output_format
        )
    if not quiet:
        console = stderr_console()
        for warning in report.warnings:
            print_warning(console, warning, flag_spelling)
        render_report(console, report, rows=rows)
        if output is not None and table is not None:
            where = "standard output" if to_stdout else str(output)
            console.print(f"{chosen} table ({table.height:,} rows) written to {where}")


def report_for(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    input_format: str | None,
    by: list[str] | None,
) -> Report:
    """Read the inputs and build the summarize report (``summarize`` and ``plot``)."""
    from grpo_cli.columns import logged_advantage
    from grpo_cli.layouts import once_per_generation
    from grpo_cli.pipeline import resolve
    from grpo_cli.presets import get_preset
    from grpo_cli.report import summarize as summarize_log

    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    log = read_input(sources, input_format, key_cols)
    given = explicit.get("advantage_col")
    explicit = {**explicit, "advantage_col": logged_advantage(log.frame.columns, given)}
    layout = get_preset(preset).layout if preset else None
    frame, repeated = once_per_generation(log.frame, layout)
    resolved = resolve(frame, preset, explicit)
    report = summarize_log(resolved.frame, resolved.options, tuple(by) if by else None)
    once = [repeated] if repeated else []
    return replace(report, warnings=(*resolved.warnings, *once, *report.warnings))


def under_trainer_names(report: Report, preset: str | None) -> Report:
    """``report``'s tables under the names the preset's trainer logs its figures (verl:
    ``critic/score/mean``...; see :func:`grpo_cli.metrics.trainer_names`)."""
    from grpo_cli.metrics import trainer_names
    from grpo_cli.presets import get_preset

    trainer = get_preset(preset).trainer.split()[0] if preset else None
    return replace(
        report,
        overall=trainer_names(report.overall, trainer),
        steps=trainer_names(report.steps, trainer),
    )

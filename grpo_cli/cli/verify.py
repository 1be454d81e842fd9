"""``grpo-adv verify``: recompute advantages and compare them with a logged column."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.help import INPUT, OUTPUT, POLICIES
from grpo_cli.cli.params import (
    Force,
    InputFormat,
    PolicyParams,
    Quiet,
    Sources,
    cli_option,
    flag_spelling,
    policy_options,
)
from grpo_cli.core.errors import EXIT_DIFFERENT
from grpo_cli.core.presets import PRESETS
from grpo_cli.io.formats import TABLE_FORMATS, describe


@policy_options()
def verify_cmd(
    sources: Sources = None,
    preset: Annotated[
        str | None,
        cli_option(
            "--preset",
            metavar="NAME",
            help=f"The trainer to compare with: {', '.join(PRESETS)} (see grpo-adv presets); "
            "auto (the default unless an option a preset sets is given): try every preset "
            "and name those that match. Explicit options override it.",
            complete=[*PRESETS, "auto"],
            panel=POLICIES,
        ),
    ] = None,
    advantage_col: Annotated[
        str | None,
        cli_option(
            "--advantage-col",
            metavar="COL",
            help="The logged advantage column to check. Default: advantage, else "
            "advantages (verl).",
            panel=INPUT,
        ),
    ] = None,
    tol: Annotated[
        float,
        cli_option(
            "--tol",
            metavar="FLOAT",
            help="Largest difference that still agrees, relative past 1: |logged - "
            "recomputed| <= tol * max(1, |recomputed|) (float32 trainers: ~1e-5). Groups "
            "float32 cannot compute within it (rewards near 1e6 with a spread near 1) are "
            "set aside with a warning.",
            panel=OUTPUT,
            show_default=True,
        ),
    ] = 1e-5,
    top: Annotated[
        int,
        cli_option(
            "--top",
            metavar="N",
            help="How many of the worst groups to show.",
            panel=OUTPUT,
            show_default=True,
        ),
    ] = 5,
    input_format: InputFormat = None,
    *,
    policy: PolicyParams,
    diff_out: Annotated[
        Path | None,
        cli_option(
            "--diff-out",
            metavar="PATH",
            help=f"Write the rows over --tol here ({describe(TABLE_FORMATS, suffixes=True)}; - "
            "for standard output): row (input row, from 0), the group key, prompt, logged, "
            "recomputed, difference (logged - recomputed).",
        ),
    ] = None,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Recompute advantages and compare them with a logged advantage column.

    Exits 0 when every row agrees within --tol (under --preset auto: when a preset
    matches), 1 when some do not.
    """
    from grpo_cli.cli.render import (
        print_warnings,
        progress_shown,
        render_verify_report,
        stderr_console,
        warner,
    )
    from grpo_cli.report.verify import run_verify

    with progress_shown(quiet=quiet):
        result = run_verify(
            sources or [],
            preset=preset,
            options=policy.explicit(),
            advantage_col=advantage_col,
            tol=tol,
            top=top,
            input_format=input_format,
            diff_out=diff_out,
            force=force,
            warnings=not quiet,
            warn=warner(quiet=quiet),
        )
    report = result.report
    if not quiet:
        console = stderr_console()
        print_warnings(console, report.warnings)
        render_verify_report(console, report, source=result.source, spell=flag_spelling)
        if result.diff_written is not None:
            console.print(f"{report.rows_over:,} differing row(s) written to {result.diff_written}")
    if not report.agree:
        raise typer.Exit(EXIT_DIFFERENT)

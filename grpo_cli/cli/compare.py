"""``grpo-adv compare``: one log's advantages under several methods side by side (the
job is :func:`grpo_cli.report.compare.run_compare`; this module parses and prints)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from grpo_cli.cli.help import OUTPUT, POLICIES
from grpo_cli.cli.params import (
    Force,
    InputFormat,
    OutputFormat,
    PolicyParams,
    Quiet,
    Sources,
    cli_option,
    policy_options,
)
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.presets import PRESETS
from grpo_cli.io.formats import DATA_FORMATS, describe

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.report.compare import Comparison


# Options of compute's policy block that compare does not take: --estimator is its own
# (repeatable: one method each); compare always computes in memory, deterministically.
NOT_SHARED = ("estimator", "deterministic", "backend", "device", "ray_address")


@policy_options(exclude=NOT_SHARED)
def compare_cmd(
    sources: Sources = None,
    preset: Annotated[
        list[str] | None,
        cli_option(
            "--preset",
            metavar="NAME",
            help="A trainer preset to compare (repeat; see grpo-adv presets), with its own "
            "policies; options given explicitly override every preset.",
            complete=PRESETS,
            panel=POLICIES,
        ),
    ] = None,
    estimator: Annotated[
        list[str] | None,
        cli_option(
            "--estimator",
            "-e",
            metavar="NAME",
            help="An estimator to compare (repeat), with the default policies and the "
            "options given.",
            complete=ESTIMATORS,
            panel=POLICIES,
        ),
    ] = None,
    input_format: InputFormat = None,
    *,
    policy: PolicyParams,
    output: Annotated[
        Path | None,
        cli_option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write every input row with one advantage_<method> column per method "
            "(- for standard output); format from the suffix "
            f"({describe(DATA_FORMATS, suffixes=True)}), else --output-format, else the "
            "input's format.",
            panel=OUTPUT,
        ),
    ] = None,
    output_format: OutputFormat = None,
    top: Annotated[
        int,
        cli_option(
            "--top",
            metavar="N",
            help="Groups shown where the methods disagree most.",
            panel=OUTPUT,
            show_default=True,
        ),
    ] = 5,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Compare one log's advantages under two or more presets or estimators, side by side.

    Per method: mean |A|, std and share of zeros; against the first method: the largest
    difference, the correlation and the share of responses whose sign differs. The layout
    and reward options are compute's, with its defaults; a trainer dump is read with the
    layout of the first preset whose dump it is.
    """
    from grpo_cli.cli.render import print_warnings, stderr_console, warner
    from grpo_cli.report.compare import run_compare

    result = run_compare(
        sources or [],
        output,
        presets=preset or [],
        estimators=estimator or [],
        options=policy.explicit(),
        top=top,
        input_format=input_format,
        output_format=output_format,
        force=force,
        warn=warner(quiet=quiet),
    )
    if quiet:
        return
    console = stderr_console()
    if result.layout is not None:
        console.print(
            f"read as a {result.layout} dump (the layout of --preset {result.layout_preset}), "
            "for every method"
        )
    print_warnings(console, result.warnings)
    render_comparison(console, result)
    if result.written is not None:
        names = ", ".join(m.column for m in result.methods)
        console.print(f"{result.frame.height:,} rows with {names} written to {result.written}")


def _percent(value: float | None) -> str:
    return "null" if value is None else f"{value:.2%}"


def render_comparison(console: Console, result: Comparison) -> None:
    """The per-method table, then the groups where the methods disagree most."""
    from rich.markup import escape

    from grpo_cli.cli.render import TableColumn, number, print_table

    first = result.methods[0]
    figures = ("n", "mean |A|", "std A", "zeros", f"max |A - {first.name}|", "correlation")
    columns = [
        TableColumn("method"),
        *(TableColumn(header, justify="right") for header in (*figures, "sign differs")),
    ]
    rows = [
        [
            escape(s.method.label),
            f"{s.responses:,}",
            number(s.mean_abs, none="null"),
            number(s.std, none="null"),
            _percent(s.zero_share),
            "" if s.method == first else number(s.max_abs_diff, none="null"),
            "" if s.method == first else number(s.correlation, none="null"),
            "" if s.method == first else _percent(s.sign_differs),
        ]
        for s in result.stats
    ]
    print_table(console, columns, rows, keys=1, title="advantages by method")
    if any(s.method != first and s.correlation is None for s in result.stats):
        console.print("correlation null: one method's advantages are constant there")
    if not result.top_groups:
        console.print("no group where the methods differ")
        return
    group_columns = [
        TableColumn("group"),
        TableColumn("size", justify="right"),
        TableColumn(f"max |A - {first.name}|", justify="right"),
        TableColumn("at"),
        TableColumn("rewards", wrap=True),
    ]
    group_rows = [
        [
            escape(", ".join(f"{name}={value}" for name, value in g.key)),
            f"{g.size:,}",
            number(g.max_abs_diff, none="null"),
            escape(g.method.name),
            ", ".join("null" if r is None else f"{r:.4g}" for r in g.rewards),
        ]
        for g in result.top_groups
    ]
    print_table(
        console,
        group_columns,
        group_rows,
        keys=1,
        title=f"groups where the methods disagree most (top {len(group_rows)})",
    )

"""``grpo-adv compare``: one log's advantages under several methods side by side (the
arithmetic is in :mod:`grpo_cli.compare`; this module reads, writes and prints)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from grpo_cli.cli.outputs import (
    protected_inputs,
    read_input,
    remove_leftovers,
    sources_or_stdin,
)
from grpo_cli.cli.params import (
    BatchCol,
    Force,
    GroupCol,
    InputFormat,
    LengthCol,
    Quiet,
    RewardCol,
    Sources,
    _completes,
    explicit_fields,
)
from grpo_cli.estimators import ESTIMATORS
from grpo_cli.presets import PRESETS

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.compare import Comparison


def compare_cmd(
    sources: Sources = None,
    preset: Annotated[
        list[str] | None,
        typer.Option(
            "--preset",
            metavar="NAME",
            help="A trainer preset to compare (repeat; see grpo-adv presets), with its own "
            "policies.",
            autocompletion=_completes(lambda: PRESETS),
            show_default=False,
        ),
    ] = None,
    estimator: Annotated[
        list[str] | None,
        typer.Option(
            "--estimator",
            "-e",
            metavar="NAME",
            help="An estimator to compare (repeat), with the default policies.",
            autocompletion=_completes(lambda: ESTIMATORS),
            show_default=False,
        ),
    ] = None,
    group_col: GroupCol = None,
    reward_col: RewardCol = None,
    batch_col: BatchCol = None,
    length_col: LengthCol = None,
    input_format: InputFormat = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write every input row with one advantage_<method> column per method "
            "(- for standard output); format from the suffix: .parquet, .csv, .jsonl, .json.",
            show_default=False,
        ),
    ] = None,
    top: Annotated[
        int,
        typer.Option("--top", metavar="N", help="Groups shown where the methods disagree most."),
    ] = 5,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Compare one log's advantages under two or more presets or estimators, side by side.

    Per method: mean |A|, std and share of zeros; against the first method: the largest
    difference, the correlation and the share of responses whose sign differs.
    """
    from grpo_cli.compare import compare, methods_from
    from grpo_cli.io import check_output_path, table_format, write_table
    from grpo_cli.render import print_warning, stderr_console

    methods = methods_from(preset or [], estimator or [])
    sources = sources_or_stdin(sources)
    explicit = explicit_fields(
        group_col=group_col, reward_col=reward_col, batch_col=batch_col, length_col=length_col
    )
    protected = protected_inputs(sources)
    to_stdout = output is not None and str(output) == "-"
    if output is not None:
        table_format(output)  # before any input is read
        check_output_path(output, force=force, protected=protected)
    log = read_input(sources, input_format, tuple(explicit.get("group_cols", ("prompt_id",))))
    result = compare(log.frame, methods, explicit, top=top)
    console = stderr_console()
    if output is not None:
        if not to_stdout:
            remove_leftovers(console, [output], quiet=quiet)
        write_table(result.frame, output, force=force, protected=protected)
    if quiet:
        return
    for warning in result.warnings:
        print_warning(console, warning)
    render_comparison(console, result)
    if output is not None:
        where = "standard output" if to_stdout else str(output)
        names = ", ".join(m.column for m in methods)
        console.print(f"{result.frame.height:,} rows with {names} written to {where}")


def _num(value: float | None) -> str:
    return "null" if value is None else f"{value:.4g}"


def _share(value: float | None) -> str:
    return "null" if value is None else f"{value:.2%}"


def render_comparison(console: Console, result: Comparison) -> None:
    """The per-method table, then the groups where the methods disagree most."""
    from rich.markup import escape

    from grpo_cli.render import TableColumn, print_table

    first = result.methods[0]
    columns = [
        TableColumn("method"),
        *(TableColumn(header, justify="right") for header in ("n", "mean |A|", "std A", "zeros")),
        *(
            TableColumn(header, justify="right")
            for header in (f"max |A - {first.name}|", "correlation", "sign differs")
        ),
    ]
    rows = [
        [
            escape(s.method.label),
            f"{s.responses:,}",
            _num(s.mean_abs),
            _num(s.std),
            _share(s.zero_share),
            "" if s.method == first else _num(s.max_abs_diff),
            "" if s.method == first else _num(s.correlation),
            "" if s.method == first else _share(s.sign_differs),
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
            str(g.size),
            _num(g.max_abs_diff),
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

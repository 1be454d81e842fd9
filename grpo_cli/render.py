"""Everything a human reads on stderr: Rich tables, warnings and error lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from grpo_cli.errors import GrpoAdvError
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.summary import RunSummary


def stderr_console() -> Console:
    """A console on stderr that never wraps a message line."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(console: Console, error: GrpoAdvError) -> None:
    """``error: <message>`` then ``hint: <hint>``, one line each."""
    console.print(f"[bold red]error:[/] {error.message}", markup=True, emoji=False)
    if error.hint:
        console.print(f"[yellow]hint:[/] {error.hint}", markup=True, emoji=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def print_warning(console: Console, message: str) -> None:
    """``warning: <message>`` on one line."""
    console.print(f"[yellow]warning:[/] {_escape(message)}", emoji=False)


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def _share(count: int, total: int) -> str:
    return f"{count} ({100 * count / total:.1f}%)" if total else str(count)


def render_run_summary(
    console: Console,
    summary: RunSummary,
    options: AdvantageOptions,
    output: str,
    group_table_path: str | None = None,
) -> None:
    """The summary table of one ``compute`` run."""
    table = Table(title="grpo-adv compute", show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    table.add_row("rows", f"{summary.rows:,}")
    table.add_row("groups", f"{summary.groups:,}  (by {', '.join(options.group_cols)})")
    table.add_row(
        "group size min / median / max",
        f"{summary.group_size_min} / {summary.group_size_median:g} / {summary.group_size_max}",
    )
    table.add_row(
        "zero-variance groups",
        f"{_share(summary.zero_std_groups, summary.groups)}; "
        f"frac_reward_zero_std {summary.frac_reward_zero_std:.4f}",
    )
    table.add_row(
        "singleton groups", f"{summary.singleton_groups} (--singleton {options.singleton})"
    )
    nan_note = f" ({summary.nan_rewards} NaN)" if summary.nan_rewards else ""
    table.add_row("null rewards", f"{summary.null_rewards}{nan_note}")
    table.add_row("reward mean / std", f"{_num(summary.reward_mean)} / {_num(summary.reward_std)}")
    table.add_row(
        "advantage min / max", f"{_num(summary.advantage_min)} / {_num(summary.advantage_max)}"
    )
    table.add_row(
        "estimator",
        f"{options.estimator} (ddof {options.ddof}, eps {options.eps:g})",
    )
    table.add_row("output", _escape(output))
    if group_table_path is not None:
        table.add_row("group table", _escape(group_table_path))
    console.print(table)

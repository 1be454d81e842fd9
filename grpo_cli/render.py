"""Everything a human reads on stderr: Rich tables, warnings and error lines."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import TaskID
from rich.table import Table

if TYPE_CHECKING:
    from grpo_cli.errors import GrpoAdvError
    from grpo_cli.explain import Explanation
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.report import Report
    from grpo_cli.summary import RunSummary
    from grpo_cli.verify import VerifyReport


def stderr_console() -> Console:
    """A console on stderr that never wraps a message line."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(console: Console, error: GrpoAdvError) -> None:
    """``error: <message>`` then ``hint: <hint>``, one line each."""
    console.print(f"[bold red]error:[/] {_escape(error.message)}", markup=True, emoji=False)
    if error.hint:
        console.print(f"[yellow]hint:[/] {_escape(error.hint)}", markup=True, emoji=False)


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
    *,
    output: str,
    group_table_path: str | None = None,
    preset: str | None = None,
    layout: str | None = None,
) -> None:
    """The summary table of one ``compute`` run."""
    table = Table(title="grpo-adv compute", show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    table.add_row("rows", f"{summary.rows:,}")
    grouping = (
        f"runs of {options.group_size} rows"
        if options.group_size
        else ", ".join(options.group_cols)
    )
    table.add_row("groups", f"{summary.groups:,}  (by {_escape(grouping)})")
    batch = (
        f"{summary.batches:,} (by {options.batch_col})"
        if options.batch_col
        else "the whole input is one batch"
    )
    table.add_row("batches", batch)
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
    table.add_row("null rewards", f"{summary.null_rewards} (--nulls {options.nulls})")
    table.add_row("reward mean / std", f"{_num(summary.reward_mean)} / {_num(summary.reward_std)}")
    table.add_row(
        "advantage min / max", f"{_num(summary.advantage_min)} / {_num(summary.advantage_max)}"
    )
    method = f"{options.estimator} (ddof {options.ddof}, eps {options.eps:g} {options.eps_mode}"
    if options.clip is not None:
        method += f", clip [{options.clip[0]:g}, {options.clip[1]:g}]"
    if len(options.reward_cols) > 1:
        method += f", {len(options.reward_cols)} rewards {options.aggregation}"
    table.add_row("estimator", method + ")")
    if preset is not None:
        table.add_row("preset", preset + (f" (read as a {layout} dump)" if layout else ""))
    table.add_row("output", _escape(output))
    if group_table_path is not None:
        table.add_row("group table", _escape(group_table_path))
    console.print(table)


def render_verify_report(
    console: Console, report: VerifyReport, *, preset: str | None, source: str
) -> None:
    """The outcome of ``verify``: agreement figures and the worst groups."""
    verdict = "[bold green]agree[/]" if report.agree else "[bold red]differ[/]"
    console.print(
        f"{_escape(source)} vs {preset or 'the given options'}: {verdict} "
        f"(tolerance {report.tol:g})",
        emoji=False,
    )
    table = Table(show_header=False)
    table.add_column("figure", style="bold")
    table.add_column("value")
    table.add_row("recomputed as", _escape(describe_method(report.options, report.layout)))
    table.add_row("rows compared", f"{report.rows:,}")
    table.add_row("max |difference|", f"{report.max_abs_diff:.3g}")
    table.add_row("rows over tolerance", f"{report.rows_over:,}")
    table.add_row("groups over tolerance", f"{report.groups_over:,} of {report.groups:,}")
    console.print(table)
    if report.worst.height:
        worst = Table(title="worst groups", title_justify="left")
        for column in report.worst.columns:
            worst.add_column(column)
        for row in report.worst.iter_rows():
            worst.add_row(*(_escape(_cell(v)) for v in row))
        console.print(worst)


def describe_method(options: AdvantageOptions, layout: str | None = None) -> str:
    """One line saying how advantages were computed: estimator, rewards, groups, batches."""
    rewards = ", ".join(options.reward_cols)
    if options.reward_weights is not None:
        rewards += " (weights " + ", ".join(f"{w:g}" for w in options.weights) + ")"
    if options.group_size:
        groups = f"runs of {options.group_size} rows"
    else:
        shown = {"__grpo_uid_group": "uid (without _session_index)"}
        groups = ", ".join(shown.get(c, c) for c in options.group_cols)
    text = (
        f"{options.estimator}, ddof {options.ddof}, eps {options.eps:g} {options.eps_mode}, "
        f"singleton {options.singleton}, nulls {options.nulls}; rewards {rewards}; "
        f"groups by {groups}"
    )
    if options.batch_col:
        text += f" within {options.batch_col}"
    if layout:
        text += f"; read as a {layout} dump"
    return text


def _cell(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_presets(console: Console) -> None:
    """``grpo-adv presets``: one row per preset, its conventions on one folded line."""
    from grpo_cli.presets import presets_frame

    table = Table(title="grpo-adv presets (explicit options override them)", show_lines=True)
    table.add_column("preset", style="bold", no_wrap=True)
    table.add_column("reproduces", overflow="fold")
    table.add_column("conventions", overflow="fold")
    for row in presets_frame().iter_rows(named=True):
        conventions = [
            f"estimator {row['estimator']}",
            f"ddof {row['ddof']}",
            f"eps {row['eps']}",
            f"singleton {row['singleton']}",
            f"nulls {row['nulls']}",
        ]
        if row["clip"]:
            conventions.append(f"clip {row['clip']}")
        if row["token_weighted"]:
            conventions.append("token-weighted")
        if row["aggregation"] != "sum_then_normalize":
            conventions.append(row["aggregation"])
        if row["layout"]:
            conventions.append(f"reads {row['layout']} dumps")
        table.add_row(row["preset"], _escape(row["reproduces"]), _escape(", ".join(conventions)))
    console.print(table)


class DelayedProgress:
    """A transient Rich progress display on stderr that appears only when the work lasts
    longer than ``delay`` seconds, and only when ``enabled`` (stderr is a terminal)."""

    def __init__(self, console: Console, *, enabled: bool, delay: float = 1.5) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.enabled = enabled
        self.delay = delay
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
        )
        self._timer: threading.Timer | None = None

    def __enter__(self) -> DelayedProgress:
        if self.enabled:
            self._timer = threading.Timer(self.delay, self.progress.start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
            self.progress.stop()

    def add(self, description: str, total: int) -> TaskID:
        """A new line of the display."""
        return self.progress.add_task(description, total=total)

    def advance(self, task: TaskID, steps: int = 1) -> None:
        self.progress.advance(task, steps)


# --------------------------------------------------------------------------- summarize

SPARK_BARS = "▁▂▃▄▅▆▇█"
STEP_COLUMNS = (
    "responses",
    "groups",
    "group_size_median",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "group_reward_std",
    "pass_at_n",
    "advantage_mean",
    "frac_zero_advantage",
)
SPARK_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "group_size_median", "pass_at_n")


def sparkline(values: list[float | None]) -> str:
    """One block character per value, scaled between the smallest and largest (a gap for
    a missing value)."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    lo, hi = min(present), max(present)
    span = hi - lo
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = 0 if span == 0 else round((v - lo) / span * (len(SPARK_BARS) - 1))
            out.append(SPARK_BARS[level])
    return "".join(out)


def histogram_lines(edges: list[float], counts: list[int], width: int = 40) -> list[str]:
    """A horizontal bar per bin: ``[lo, hi)  count  ####``."""
    if not counts:
        return ["(no values)"]
    top = max(counts) or 1
    lines = []
    for i, count in enumerate(counts):
        bar = "█" * round(count / top * width)
        lines.append(f"{edges[i]:>9.3g} .. {edges[i + 1]:<9.3g} {count:>8,}  {bar}")
    return lines


def render_report(console: Console, report: Report, *, rows: int = 20, bins: int = 12) -> None:
    """Overall figures, the per-step table (first and last ``rows`` // 2 steps when there
    are more), per-step sparklines, and histograms of rewards and advantages."""
    import polars as pl

    from grpo_cli.report import histogram

    overall = report.overall.row(0, named=True)
    table = Table(title="grpo-adv summarize: overall", show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value")
    for name, value in overall.items():
        table.add_row(name, _value(value))
    console.print(table)
    steps = report.steps
    if report.by and steps.height:
        shown = [c for c in (*report.by, *STEP_COLUMNS) if c in steps.columns]
        step_table = Table(
            title=f"per {', '.join(report.by)} ({steps.height:,} values)", title_justify="left"
        )
        for name in shown:
            step_table.add_column(name, justify="right")
        half = max(rows // 2, 1)
        picked = steps if steps.height <= rows else pl.concat([steps.head(half), steps.tail(half)])
        for i, record in enumerate(picked.select(shown).iter_rows()):
            if steps.height > rows and i == half:
                step_table.add_row(*("..." for _ in shown))
            step_table.add_row(*(_value(v) for v in record))
        console.print(step_table)
        for name in SPARK_METRICS:
            if name in steps.columns:
                series = steps[name].to_list()
                line = sparkline(series)
                present = [v for v in series if v is not None]
                if present:
                    console.print(
                        f"{name:>22}  {line}  {_value(present[0])} → {_value(present[-1])}",
                        emoji=False,
                    )
    for title, values in (("reward", report.rewards), ("advantage", report.advantages)):
        if values is None:
            continue
        edges, counts = histogram(values, bins)
        console.print(f"\n[bold]{title} histogram[/] ({values.len():,} values)")
        for line in histogram_lines(edges, counts):
            console.print(line, emoji=False, markup=False)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _num(value, 4)
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else _escape(str(value))


# --------------------------------------------------------------------------- explain


def render_explanation(console: Console, e: Explanation) -> None:
    """One group, the formula filled in for every response."""
    o = e.options
    key = ", ".join(f"{k}={v}" for k, v in e.key.items())
    console.print(f"[bold]group {_escape(key)}[/]: {e.size} responses", emoji=False)
    console.print(
        f"estimator {o.estimator}: {_escape(e.estimator_summary)}  "
        f"(ddof={o.ddof}, eps={o.eps:g}, eps_mode={o.eps_mode}, singleton={o.singleton}, "
        f"nulls={o.nulls}{', clip=' + str(o.clip) if o.clip else ''})",
        emoji=False,
    )
    for line in e.steps:
        console.print(f"  {_escape(line)}", emoji=False)
    if e.formula:
        console.print(f"  [bold]{_escape(e.formula)}[/]", emoji=False)
    for note in e.notes:
        console.print(f"  [yellow]note:[/] {_escape(note)}", emoji=False)
    table = Table(title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("reward", justify="right")
    table.add_column("with the numbers")
    table.add_column("advantage", justify="right", style="bold")
    if e.logged:
        table.add_column("logged", justify="right")
    for i, row in enumerate(e.rows):
        formula = row.formula
        if row.value is not None and row.policy is None:
            formula = f"{formula} = {row.value:.6g}"
        if row.policy is not None:
            formula = f"{formula}  [{row.policy}]" if row.formula != "-" else row.policy
        cells = [str(i), _num(row.reward, 6), _escape(formula), _num(row.advantage, 6)]
        if e.logged:
            cells.append(_num(row.logged, 6))
        table.add_row(*cells)
    console.print(table)

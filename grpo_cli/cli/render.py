"""Everything a human reads on stderr: Rich tables, warnings and error lines."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import ProgressColumn, Task, TaskID
from rich.table import Table
from rich.text import Text

from grpo_cli.core.columns import readable
from grpo_cli.core.errors import as_text, one_line, option

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from grpo_cli.core.errors import GrpoAdvError, Message, Spelling
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.jobs.run import JobResult
    from grpo_cli.report.explain import Explanation
    from grpo_cli.report.summarize import Report
    from grpo_cli.report.verify import VerifyReport


class PipeConsole(Console):
    """A Rich console whose closed pipe (``... 2>&1 | head``) is a BrokenPipeError (exit 0,
    as a closed stdout), not Rich's exit 1; its stream then goes to ``/dev/null``."""

    def on_broken_pipe(self) -> None:
        import errno

        from grpo_cli.io.write import silence

        silence(self.file)
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def stderr_console() -> Console:
    """A console on stderr that never wraps a message line."""
    return PipeConsole(stderr=True, highlight=False, soft_wrap=True)


def print_error(console: Console, error: GrpoAdvError, spell: Spelling) -> None:
    """``error: <message>`` then ``hint: <hint>``, one line each, options named as
    ``spell`` names them (the command line: its flags)."""
    message, hint = error.render(spell)
    _print_labelled(console, "[bold red]error:[/]", message)
    if hint:
        _print_labelled(console, "[yellow]hint:[/]", hint)


def _print_labelled(console: Console, label: str, text: str) -> None:
    console.print(f"{label} {escape(text)}", markup=True, emoji=False)


def print_warning(console: Console, message: Message, spell: Spelling) -> None:
    """``warning: <message>`` on one line (control characters escaped), options named as
    ``spell`` names them."""
    _print_labelled(console, "[yellow]warning:[/]", one_line(as_text(message).render(spell)))


def print_warnings(console: Console, messages: Iterable[Message]) -> None:
    """Each of ``messages`` as :func:`print_warning` says it, options named by their flags."""
    from grpo_cli.cli.params import flag_spelling

    for message in messages:
        print_warning(console, message, flag_spelling)


def warner(*, quiet: bool) -> Callable[[Message], None] | None:
    """Where the core's warnings go: :func:`print_warning` on stderr, or nowhere (--quiet)."""
    if quiet:
        return None
    from grpo_cli.cli.params import flag_spelling

    return functools.partial(print_warning, stderr_console(), spell=flag_spelling)


def print_note(console: Console, message: Message, spell: Spelling) -> None:
    """``note: <message>`` on one line (control characters escaped), options named as
    ``spell`` names them: what the user should know, nothing wrong."""
    _print_labelled(console, "[cyan]note:[/]", one_line(as_text(message).render(spell)))


def number(value: float | None, digits: int = 4, none: str = "-") -> str:
    """A number as the tables show it: ``digits`` significant digits; ``none`` for null."""
    return none if value is None else f"{value:.{digits}g}"


def _share(count: int, total: int) -> str:
    share = f" ({100 * count / total:.1f}%)" if total else ""
    return f"{count:,}{share}"


# --------------------------------------------------------------------------- tables that fit

# A text column need not be wider than this to keep its words whole: a longer word (an
# identifier, a path, key=value) may fold onto the next line.
_MAX_WORD_FLOOR = 20


@dataclass(frozen=True)
class TableColumn:
    """One column of :func:`print_table`: ``wrap`` cells (free text) wrap on whitespace and
    fold a word too long for the column; others (numbers, names) stay whole on one line."""

    header: str
    justify: JustifyMethod = "left"
    style: str = ""
    wrap: bool = False


def print_table(
    console: Console,
    columns: Sequence[TableColumn],
    rows: Sequence[Sequence[str]],
    *,
    keys: int = 1,
    split: bool = True,
    title: str | None = None,
    show_header: bool = True,
    show_lines: bool = False,
    section: int = 0,
    title_justify: JustifyMethod = "left",
) -> None:
    """Print ``rows`` (markup strings) as Rich tables no wider than ``console.width`` that
    cut no number and no header (no ellipsis).

    A column's *floor* (its ``min_width``) is its widest cell for a ``no_wrap`` column,
    its longest word (at most ``_MAX_WORD_FLOOR``) for a ``wrap`` one. A table that fits
    only below its widest cells gets its floors widened toward them, key columns first,
    then the narrowest (Rich's own narrowing ignores ``min_width``). A table too wide at its
    floors is, if ``split`` and the ``keys`` columns fit beside each other column, split into
    "parts" that repeat the ``keys`` columns (each titled ", part i of n"); else, with
    three columns or more, printed vertically (:func:`_print_records`); else Rich folds the
    text column's words. ``section``: a rule under every ``section`` rows (none when 0).
    """
    keys = min(keys, len(columns))
    unbounded = console.options.update_width(sys.maxsize)  # a measure capped at no width
    floors, needs = [], []
    for i, column in enumerate(columns):
        cells = [column.header] * show_header + [row[i] for row in rows]
        sizes = [console.measure(console.render_str(cell), options=unbounded) for cell in cells]
        needs.append(max((size.maximum for size in sizes), default=1))
        words = max((size.minimum for size in sizes), default=1)
        floors.append(min(words, _MAX_WORD_FLOOR) if column.wrap else needs[-1])

    def table(part: Sequence[int], widths: Sequence[int] | None) -> Table:
        """The keys and ``part`` at ``widths`` (None: the wrap columns' words fold)."""
        shown = [*range(keys), *part]
        result = Table(show_header=show_header, show_lines=show_lines)
        for n, i in enumerate(shown):
            result.add_column(
                columns[i].header,
                justify=columns[i].justify,
                style=columns[i].style,
                overflow="fold",
                no_wrap=not columns[i].wrap,
                width=None if widths is None else widths[n],
                min_width=None if widths is None and columns[i].wrap else floors[i],
            )
        for n, row in enumerate(rows, start=1):
            result.add_row(*(row[i] for i in shown), end_section=section > 0 and n % section == 0)
        return result

    def narrowest(part: Sequence[int]) -> int:  # the table's width at the floors
        at_floors = table(part, [floors[i] for i in (*range(keys), *part)])
        return console.measure(at_floors, options=unbounded).minimum

    def fits(part: Sequence[int]) -> bool:
        return narrowest(part) <= console.width

    rest = list(range(keys, len(columns)))
    if fits(rest):
        parts = [rest]
    elif split and all(fits([i]) for i in rest):
        parts = [[]]
        for i in rest:
            if parts[-1] and not fits([*parts[-1], i]):
                parts.append([])
            parts[-1].append(i)
    elif len(columns) > 2:
        _print_records(console, columns, rows, title=title, title_justify=title_justify)
        return
    else:
        parts = [rest]
    for number, part in enumerate(parts, start=1):
        if len(parts) > 1:
            # a line of its own: a table's title wraps at the (narrower) table's width
            heading = f"part {number} of {len(parts)}"
            console.print(
                f"{title}, {heading}" if title else heading,
                style="table.title",
                justify=None if title_justify == "left" else title_justify,  # no padding
                markup=False,
                emoji=False,
            )
        shown = [*range(keys), *part]
        widths = [floors[i] for i in shown]
        spare = console.width - narrowest(part)
        for n in sorted(range(len(shown)), key=lambda n: (n >= keys, needs[shown[n]])):
            grow = max(0, min(spare, needs[shown[n]] - widths[n]))
            widths[n] += grow
            spare -= grow
        # two columns too wide at their floors: Rich folds the long words
        printed = table(part, None if spare < 0 else widths)
        printed.title = title if len(parts) == 1 else None
        printed.title_justify = title_justify
        console.print(printed)


def _print_records(
    console: Console,
    columns: Sequence[TableColumn],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None,
    title_justify: JustifyMethod,
) -> None:
    """The vertical layout of a table too wide for the console: ``header  cell`` lines, one
    per cell, a rule after each row's cells."""
    pairs = [(column.header, row[i]) for row in rows for i, column in enumerate(columns)]
    print_figures(console, pairs, title=title, section=len(columns), title_justify=title_justify)


def stages(options: AdvantageOptions) -> str:
    """The reward clip and whiten stages of ``options``, as a suffix to its estimator
    (``, reward clip [-20, 20], whiten (ddof 1, eps 1e-05 std)``); empty without them."""
    text = ""
    if options.reward_clip is not None:
        text += f", reward clip [{options.reward_clip[0]:g}, {options.reward_clip[1]:g}]"
    if options.whiten:
        text += (
            f", whiten (ddof {options.whiten_ddof}, eps {options.whiten_eps:g} "
            f"{options.whiten_eps_mode})"
        )
    return text


def render_run_summary(console: Console, result: JobResult, *, preset: str | None) -> None:
    """The summary table of one ``compute`` run (a figure/value table that fits the
    console: see :func:`print_figures`), options named by their flags."""
    from grpo_cli.cli.params import flag_spelling as spell

    summary, options = result.run, result.options
    grouping = (
        f"runs of {options.group_size} rows"
        if options.group_size
        else ", ".join(readable(column) for column in options.group_cols)
    )
    batch = (
        f"{summary.batches:,} (by {options.batch_col})"
        if options.batch_col
        else "the whole input is one batch"
    )
    method = f"{options.estimator} (ddof {options.ddof}, eps {options.eps:g} {options.eps_mode}"
    if options.clip is not None:
        method += f", clip [{options.clip[0]:g}, {options.clip[1]:g}]"
    method += stages(options)
    if len(options.reward_cols) > 1:
        method += f", {len(options.reward_cols)} rewards {options.aggregation}"
    rows = [
        ("rows", f"{summary.rows:,}"),
        ("groups", f"{summary.groups:,}  (by {escape(grouping)})"),
        ("batches", batch),
        (
            "group size min / median / max",
            f"{summary.group_size_min:,} / {summary.group_size_median:,g} / "
            f"{summary.group_size_max:,}",
        ),
        (
            "zero-variance groups",
            f"{_share(summary.zero_std_groups, summary.groups)}; "
            f"frac_reward_zero_std {summary.frac_reward_zero_std:.4f}",
        ),
        (
            "singleton groups",
            f"{summary.singleton_groups:,} ({spell(option('singleton', options.singleton))})",
        ),
        ("null rewards", f"{summary.null_rewards:,} ({spell(option('nulls', options.nulls))})"),
        ("reward mean / std", f"{number(summary.reward_mean)} / {number(summary.reward_std)}"),
        (
            "advantage min / max",
            f"{number(summary.advantage_min)} / {number(summary.advantage_max)}",
        ),
        ("estimator", method + ")"),
    ]
    if preset is not None:
        layout = f" (read as a {result.layout} dump)" if result.layout else ""
        rows.append(("preset", preset + layout))
    if summary.route is not None:
        rows.append(("route", escape(summary.route)))
    rows.append(("output", escape(result.output)))
    if result.summary_path is not None:
        rows.append(("group table", escape(str(result.summary_path))))
    print_figures(console, rows, title="grpo-adv compute")


def print_figures(
    console: Console,
    rows: Sequence[tuple[str, str]],
    *,
    title: str | None = None,
    section: int = 0,
    title_justify: JustifyMethod = "left",
) -> None:
    """A headerless two-column table, a bold figure name then its value, that fits the
    console: both columns wrap on whitespace, so a number is never cut; only a word too
    long for the console (a long path) may fold."""
    columns = [TableColumn("figure", style="bold", wrap=True), TableColumn("value", wrap=True)]
    print_table(
        console,
        columns,
        rows,
        title=title,
        show_header=False,
        section=section,
        title_justify=title_justify,
    )


def render_verify_report(
    console: Console, report: VerifyReport, *, source: str, spell: Spelling
) -> None:
    """The outcome of ``verify``: agreement figures (after ``--preset auto``'s line naming
    the presets that match), the worst groups and the report's hints (``hint: ...``, one
    line each)."""
    verdict = "[bold green]agree[/]" if report.agree else "[bold red]differ[/]"
    console.print(
        f"{escape(source)} vs {report.preset or 'the given options'}: {verdict} "
        f"(tolerance {report.tol:g})",
        emoji=False,
    )
    if report.found is not None:
        console.print(escape(as_text(report.found).render(spell)), emoji=False)
    figures = [
        ("recomputed as", escape(describe_method(report.options, report.layout))),
        ("rows compared", f"{report.rows:,}"),
        ("max |difference|", f"{report.max_abs_diff:.3g}"),
        ("rows over tolerance", f"{report.rows_over:,}"),
        ("groups over tolerance", f"{report.groups_over:,} of {report.groups:,}"),
    ]
    print_figures(console, figures)
    worst = report.worst
    if worst.height:
        # the group key columns come first; they repeat in every part of a split table
        keys = len([c for c in worst.columns if c not in ("size", "max_abs_diff")])
        columns = [
            TableColumn(
                escape(name),
                justify="right" if dtype.is_numeric() else "left",
                wrap=not dtype.is_numeric(),
            )
            for name, dtype in worst.schema.items()
        ]
        rows = [
            [escape(_cell(v, count=i >= keys)) for i, v in enumerate(row)]
            for row in worst.iter_rows()
        ]
        print_table(console, columns, rows, keys=keys, title="worst groups")
    for hint in report.hints:
        _print_labelled(console, "[yellow]hint:[/]", as_text(hint).render(spell))


def describe_method(options: AdvantageOptions, layout: str | None = None) -> str:
    """One line saying how advantages were computed: estimator, rewards, groups, batches."""
    rewards = ", ".join(options.reward_cols)
    if options.reward_weights is not None:
        rewards += " (weights " + ", ".join(f"{w:g}" for w in options.weights) + ")"
    if options.group_size:
        groups = f"runs of {options.group_size} rows"
    else:
        from grpo_cli.core.columns import UID_GROUP

        shown = {UID_GROUP: "uid (without _session_index)"}
        within = [c for c in options.group_cols if c != options.batch_col]
        groups = ", ".join(shown.get(c, c) for c in within or options.group_cols)
    text = (
        f"{options.estimator}, ddof {options.ddof}, eps {options.eps:g} {options.eps_mode}, "
        f"singleton {options.singleton}, nulls {options.nulls}{stages(options)}; "
        f"rewards {rewards}; groups by {groups}"
    )
    if options.batch_col:
        text += f" within {options.batch_col}"
    if layout:
        text += f"; read as a {layout} dump"
    return text


def _cell(value: object, *, count: bool = False) -> str:
    """A table cell: a float to 4 significant digits; an int as a count (thousands
    separated) when ``count``, else as it is (a key: step 1000 stays 1000)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if count and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render_presets(console: Console) -> None:
    """``grpo-adv presets``: one row per preset, what it reproduces and its conventions
    wrapped on whitespace to fit the console (see :func:`print_table`)."""
    from grpo_cli.core.presets import presets_frame

    rows: list[tuple[str, str, str]] = []
    for row in presets_frame().iter_rows(named=True):
        named = ("estimator", "ddof", "eps", "singleton", "nulls")
        conventions = [f"{name} {row[name]}" for name in named]
        if row["clip"]:
            conventions.append(f"clip {row['clip']}")
        if row["whiten"]:
            conventions.append(f"whiten {row['whiten']}")
        if row["token_weighted"]:
            conventions.append("token-weighted")
        if row["aggregation"] != "sum_then_normalize":
            conventions.append(row["aggregation"])
        if row["layout"]:
            conventions.append(f"reads {row['layout']} dumps")
        reproduces = f"{row['trainer']} {row['version']}: {row['setting']}"
        rows.append((row["preset"], escape(reproduces), escape(", ".join(conventions))))
    columns = [
        TableColumn("preset", style="bold"),
        TableColumn("reproduces", wrap=True),
        TableColumn("conventions", wrap=True),
    ]
    print_table(
        console,
        columns,
        rows,
        split=False,  # one row a preset reads best, its text wrapped (folded when narrow)
        title="grpo-adv presets (explicit options override them)",
        show_lines=True,
        title_justify="center",
    )


PROGRESS_DELAY_ENV = "GRPO_ADV_PROGRESS_DELAY"  # seconds before the display shows (tests)


class DelayedProgress:
    """A transient Rich progress display on stderr that appears only when the work lasts
    longer than ``delay`` seconds (default: 1.5, or the seconds in the environment variable
    GRPO_ADV_PROGRESS_DELAY), and only when ``enabled`` (stderr is a terminal). A line
    with a unit reads ``12,000,000/200,000,000 rows  2,104,000 rows/s  0:01:30 left``
    (:class:`grpo_cli.core.progress.Pace`); one without, ``1/2``."""

    def __init__(self, console: Console, *, enabled: bool, delay: float | None = None) -> None:
        import os

        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            _PaceColumn(),
            console=console,
            transient=True,
        )
        if delay is None:
            delay = float(os.environ.get(PROGRESS_DELAY_ENV) or 1.5)
        self._timer = threading.Timer(delay, self.progress.start) if enabled else None
        self._last: TaskID | None = None

    def __enter__(self) -> DelayedProgress:
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
            self.progress.stop()

    def add(self, description: str, total: int | None, unit: str | None = None) -> TaskID:
        """A new line of the display; the one before it stops (its rate and time kept)."""
        if self._last is not None:
            self.progress.stop_task(self._last)
        self._last = self.progress.add_task(description, total=total, unit=unit)
        return self._last

    def advance(self, task: TaskID, steps: int = 1) -> None:
        self.progress.advance(task, steps)


@contextlib.contextmanager
def progress_shown(*, quiet: bool) -> Iterator[None]:
    """The stages the core reports (:mod:`grpo_cli.core.progress`) shown on stderr while
    the block runs: a :class:`DelayedProgress`, when stderr is a terminal and not ``quiet``
    (the report commands on a big log; compute passes its own to the job)."""
    from grpo_cli.core.progress import reporting

    console = stderr_console()
    shown = DelayedProgress(console, enabled=console.is_terminal and not quiet)
    with shown, reporting(shown):
        yield


class _PaceColumn(ProgressColumn):
    """Done of total, then with a unit its rate and the time left."""

    def render(self, task: Task) -> Text:
        from datetime import timedelta

        from grpo_cli.core.progress import Pace

        total = "?" if task.total is None else f"{task.total:,.0f}"
        unit = task.fields.get("unit")
        if unit is None:
            return Text(f"{task.completed:,.0f}/{total}")
        seconds = task.finished_time if task.finished_time is not None else task.elapsed
        pace = Pace(task.completed, task.total, seconds or 0.0)
        rate = "?" if pace.rate is None else f"{pace.rate:,.0f}"
        left = "" if pace.left is None else f"  {timedelta(seconds=round(pace.left))} left"
        return Text(f"{task.completed:,.0f}/{total} {unit}  {rate} {unit}/s{left}")


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
    lo, span = min(present), max(present) - min(present)
    top = len(SPARK_BARS) - 1
    return "".join(
        " " if v is None else SPARK_BARS[0 if span == 0 else round((v - lo) / span * top)]
        for v in values
    )


HISTOGRAM_BAR_WIDTH = 40
HISTOGRAM_LABEL_WIDTH = 33  # what comes before a histogram bar: ``lo .. hi count`` and 2 spaces


def histogram_lines(
    edges: list[float], counts: list[int], width: int = HISTOGRAM_BAR_WIDTH
) -> list[str]:
    """A horizontal bar per bin: ``[lo, hi)  count  ####``, the longest bar ``width``
    characters (each line ``HISTOGRAM_LABEL_WIDTH`` more)."""
    if not counts:
        return ["(no values)"]
    top = max(counts) or 1
    return [
        f"{lo:>9.3g} .. {hi:<9.3g} {count:>8,}  {'█' * round(count / top * width)}"
        for lo, hi, count in zip(edges, edges[1:], counts, strict=False)
    ]


def render_report(console: Console, report: Report, *, rows: int = 20, bins: int = 12) -> None:
    """Overall figures, the per-step table (first and last ``rows`` // 2 steps when there
    are more; see :func:`print_table`), per-step sparklines, and histograms of rewards and
    advantages whose bars shrink to fit the console."""
    import polars as pl

    from grpo_cli.report.summarize import histogram

    overall = report.overall.row(0, named=True)
    print_figures(
        console,
        [(name, _value(value)) for name, value in overall.items()],
        title="grpo-adv summarize: overall",
    )
    steps = report.steps
    if report.by and steps.height:
        from grpo_cli.core.metrics import logged_name

        step_columns = [c for name in STEP_COLUMNS for c in logged_name(name)]
        shown = list(dict.fromkeys(c for c in (*report.by, *step_columns) if c in steps.columns))
        columns = [
            TableColumn(
                escape(name),
                justify="right",
                wrap=name in report.by and not steps.schema[name].is_numeric(),
            )
            for name in shown
        ]
        half = max(rows // 2, 1)
        picked = steps if steps.height <= rows else pl.concat([steps.head(half), steps.tail(half)])
        cells: list[list[str]] = []
        for i, record in enumerate(picked.select(shown).iter_rows()):
            if steps.height > rows and i == half:
                cells.append(["..." for _ in shown])
            n_by = len(report.by)  # keys (a step) as they are; figures as figures
            cells.append([_key(v) if i < n_by else _value(v) for i, v in enumerate(record)])
        print_table(
            console,
            columns,
            cells,
            keys=len(report.by),
            title=f"per {', '.join(report.by)} ({steps.height:,} values)",
        )
        spark = [c for name in SPARK_METRICS for c in logged_name(name) if c in steps.columns]
        for name in dict.fromkeys(spark):
            series = steps[name].to_list()
            present = [v for v in series if v is not None]
            if present:
                console.print(
                    f"{name:>22}  {sparkline(series)}  {_value(present[0])} → "
                    f"{_value(present[-1])}",
                    emoji=False,
                )
    for title, values in (("reward", report.rewards), ("advantage", report.advantages)):
        if values is None:
            continue
        edges, counts = histogram(values, bins)
        counted = f"{values.len():,} values{report.sample_note}"
        console.print(f"\n[bold]{title} histogram[/] ({counted})")
        bar_width = max(1, min(HISTOGRAM_BAR_WIDTH, console.width - HISTOGRAM_LABEL_WIDTH))
        for line in histogram_lines(edges, counts, bar_width):
            console.print(line, emoji=False, markup=False)


def _key(value: object) -> str:
    """A key's value (a step, a prompt id): as it is, never as a count (step 1000)."""
    return "-" if value is None else escape(_cell(value))


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value, 4)
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else escape(str(value))


# --------------------------------------------------------------------------- explain


def render_explanation(console: Console, e: Explanation, spell: Spelling) -> None:
    """One group, the formula filled in for every response (:func:`print_table`, keyed by
    ``row``), with its step, each summed reward (None said) and the start of its text when
    the log has them. The warnings are the caller's to print (on stderr)."""
    o = e.options
    key = ", ".join(f"{k}={v}" for k, v in e.key.items())
    responses = "response" if e.size == 1 else "responses"
    console.print(f"[bold]group {escape(key)}[/]: {e.size:,} {responses}", emoji=False)
    if e.chosen:
        console.print(f"  {escape(as_text(e.chosen).render(spell))}", emoji=False)
    console.print(
        f"estimator {o.estimator}: {escape(e.estimator_summary)}  "
        f"(ddof={o.ddof}, eps={o.eps:g}, eps_mode={o.eps_mode}, singleton={o.singleton}, "
        f"nulls={o.nulls}{', clip=' + str(o.clip) if o.clip else ''}{stages(o)})",
        emoji=False,
    )
    for line in e.steps:
        console.print(f"  {escape(line)}", emoji=False)
    if e.formula:
        console.print(f"  [bold]{escape(e.formula)}[/]", emoji=False)
    for note in e.notes:
        console.print(f"  [yellow]note:[/] {escape(note)}", emoji=False)
    numbered = any(row.row is not None for row in e.rows)  # else: within the group
    columns = [TableColumn("row" if numbered else "#", justify="right")]
    if e.step_col:
        columns.append(TableColumn(e.step_col, justify="right"))
    columns += [TableColumn(c, justify="right") for c in e.reward_cols]
    columns += [
        TableColumn("reward", justify="right"),
        TableColumn("with the numbers", wrap=True),
        TableColumn("advantage", justify="right", style="bold"),
    ]
    if e.logged:
        columns.append(TableColumn("logged", justify="right"))
    if e.text_col:
        columns.append(TableColumn(e.text_col, wrap=True))
    rows: list[list[str]] = []
    for i, row in enumerate(e.rows):
        formula = row.formula
        if row.value is not None and row.policy is None:
            formula = f"{formula} = {row.value:.6g}"
        if row.policy is not None:
            policy = as_text(row.policy).render(spell)
            formula = f"{formula}  [{policy}]" if row.formula != "-" else policy
        cells = [str(row.row if numbered else i)]
        if e.step_col:
            cells.append("-" if row.step is None else escape(str(row.step)))
        cells += ["None" if v is None else number(v, 6) for v in row.parts]
        cells += [number(row.reward, 6), escape(formula), number(row.advantage, 6)]
        if e.logged:
            cells.append(number(row.logged, 6))
        if e.text_col:
            cells.append("-" if row.text is None else escape(row.text))
        rows.append(cells)
    print_table(console, columns, rows, keys=1)

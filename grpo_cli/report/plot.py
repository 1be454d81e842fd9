"""``plot``: a dashboard of a :class:`grpo_cli.report.summarize.Report` as PNG, SVG, PDF or HTML.

The panels, top to bottom: the advantage histogram (annotated logs; one step histogram per
method for a ``compare`` output; else the per-group reward std) beside the reward
histogram; then, with a per-step table, sharing the step axis: the reward mean with its
std band, ``frac_reward_zero_std`` on its own axis scaled to its values, and the group
size min / median / max. The group-size panel is drawn only when group sizes vary (a
histogram of them without a per-step table). A curve of more than 4 x CURVE_BINS steps is
drawn from the points that show at the figure's resolution (:func:`thinned`,
:func:`thinned_band`): the same picture, in memory and file size set by CURVE_BINS, not by
the steps (a billion-row log has 248,820). Legends sit right of their axes. HTML embeds
the SVG and the overall and per-step tables. matplotlib (the ``plot`` extra) is imported
only to draw, with the Agg backend.
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from grpo_cli.core.errors import (
    OptionsError,
    Spelling,
    Verbatim,
    install_command,
    keyword_spelling,
    option,
)
from grpo_cli.report.summarize import Report

PLOT_FORMATS: Final = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".html": "html", ".htm": "html"}
INSTALL_HINT: Final = "install it with: " + install_command("plot")
DEFAULT_SUFFIX: Final = ".report.png"
DPI: Final = 110
WIDTH_IN: Final = 12.0
# Panel heights (inches): the histogram row, the reward curve, each smaller curve.
_HIST_IN: Final = 3.4
_REWARD_IN: Final = 2.8
_SMALL_IN: Final = 2.0
_TITLE_IN: Final = 0.8
# Legends: outside the axes, to the right of the top corner.
_LEGEND: Final[dict[str, Any]] = {
    "loc": "upper left",
    "bbox_to_anchor": (1.01, 1.0),
    "borderaxespad": 0.0,
    "fontsize": 8,
    "frameon": False,
}
_GREEN, _RED, _BLUE, _ORANGE, _BROWN, _PURPLE = (
    "#55A868",
    "#C44E52",
    "#4C72B0",
    "#DD8452",
    "#937860",
    "#8172B2",
)
# No creation date: the same report gives the same bytes.
_SAVE_METADATA: Final = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


@dataclass(frozen=True)
class PlotResult:
    """What :func:`run_plot` did: the dashboard's ``path`` and the ``report`` it draws."""

    path: Path
    report: Report


def run_plot(
    inputs: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    preset: str | None = None,
    options: Mapping[str, Any] | None = None,
    by: Sequence[str] | None = None,
    estimator: str | None = None,
    input_format: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
    spell: Spelling = keyword_spelling,
) -> PlotResult:
    """Draw the dashboard of the log in ``inputs`` (what ``grpo-adv plot`` runs), the
    output path, its format and ``estimator`` checked before any input is read.

    Args:
        inputs, preset, options, by, input_format, force, warn: as for
            :func:`grpo_cli.report.summarize.run_summarize`.
        output: the dashboard (.png, .svg, .pdf or .html); None: :func:`default_plot_path`.
        estimator: the estimator the advantages came from, named in the title only.
        spell: how the dashboard's text names options (the command line's flags).
    """
    from grpo_cli.core.estimators import get_estimator
    from grpo_cli.io.write import check_output_path
    from grpo_cli.jobs.outputs import input_paths, remove_leftovers, sources_or_stdin
    from grpo_cli.report.summarize import read_report

    sources = sources_or_stdin([str(source) for source in inputs])
    path = default_plot_path(sources) if output is None else Path(output)
    fmt = check_plot_path(path)
    if estimator is not None:
        get_estimator(estimator)  # an unknown name fails before any input is read
    remove_leftovers([path], warn)  # whatever this run's fate
    paths = input_paths(sources)
    check_output_path(path, force=force, protected=paths)
    preload_pyplot()  # while the log is read and summarized
    report = read_report(paths, preset, dict(options or {}), input_format, by)
    title = dashboard_title(sources, preset=preset, estimator=estimator)
    write_dashboard(report, path, fmt, title=title, force=force, spell=spell)
    return PlotResult(path, report)


def check_plot_path(path: Path) -> str:
    """The dashboard format (png, svg, pdf or html) from the suffix of ``path``; an
    OptionsError for any other suffix."""
    fmt = PLOT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise OptionsError(
            f"cannot tell the plot format of {path}",
            hint="end the file name with .png, .svg, .pdf or .html",
        )
    return fmt


def default_plot_path(sources: Sequence[str]) -> Path:
    """Where ``plot`` without ``-o`` writes: ``<stem>.report.png`` beside the one input
    (``r.jsonl.gz`` -> ``r.report.png``; a folder ``runs/logs`` -> ``runs/logs.report.png``,
    ``.`` -> ``../<its name>.report.png``). Standard input, a glob or several inputs: an
    OptionsError asks for ``-o``."""
    from grpo_cli.io.formats import uncompressed_name

    if len(sources) != 1 or sources[0] == "-" or not Path(sources[0]).exists():
        raise OptionsError(
            "plot needs -o PATH here: the dashboard is named after a single input file",
            hint="give -o report.png (or .svg, .pdf, .html)",
        )
    source = Path(sources[0])
    if not source.is_dir():
        return source.with_name(uncompressed_name(source).stem + DEFAULT_SUFFIX)
    folder = source.resolve()  # "." and ".." have no name of their own
    path = folder.with_name(folder.name + DEFAULT_SUFFIX)
    return path if source.is_absolute() else Path(os.path.relpath(path))


def dashboard_title(
    sources: Sequence[str], *, preset: str | None = None, estimator: str | None = None
) -> str:
    """The dashboard's title: the inputs' file names (three at most, then a count) and the
    preset and/or estimator, e.g. ``grpo-adv: rewards.adv.parquet (preset trl)``; with
    neither, the default estimator: ``(estimator grpo)``."""
    names = ["standard input" if s == "-" else (Path(s).name or s) for s in sources]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    run = [f"preset {preset}"] if preset else []
    if estimator or not preset:
        from grpo_cli.core.options import AdvantageOptions

        run.append(f"estimator {estimator or AdvantageOptions().estimator}")
    return f"grpo-adv: {shown} ({', '.join(run)})"


def preload_pyplot() -> None:
    """Import pyplot in a background thread while the log is read (Polars releases the
    interpreter lock); a missing matplotlib is left for :func:`_pyplot` to report."""
    import threading

    def load() -> None:
        with contextlib.suppress(Exception):
            _pyplot()

    threading.Thread(target=load, name="grpo-adv-pyplot", daemon=True).start()


def _hist(ax: Any, values: Any, bins: int, color: str) -> None:
    """``ax.hist`` of a Series, binned by :func:`grpo_cli.report.summarize.histogram`."""
    from grpo_cli.report.summarize import histogram

    edges, counts = histogram(values, bins)
    if counts:
        ax.hist(edges[:-1], bins=edges, weights=counts, color=color)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise OptionsError(
            "plot needs matplotlib, which is not installed", hint=INSTALL_HINT
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sizes_vary(report: Report) -> bool:
    """Whether the log's groups differ in size (the group-size panel is drawn only then)."""
    overall = report.overall
    if overall.height and {"group_size_min", "group_size_max"} <= set(overall.columns):
        return bool(overall["group_size_min"][0] != overall["group_size_max"][0])
    return report.group_sizes["size"].n_unique() > 1


def figure(report: Report, title: str = "grpo-adv", *, spell: Spelling = keyword_spelling) -> Any:
    """The dashboard as a matplotlib Figure (see the module docstring); ``title``: its
    first title line (:func:`dashboard_title`); ``spell``: how its hint names an option."""
    plt = _pyplot()
    per_step = bool(report.by) and report.steps.height > 0
    vary = sizes_vary(report)
    lower = ([_REWARD_IN, _SMALL_IN] if per_step else []) + ([_SMALL_IN] if vary else [])
    height = _HIST_IN + sum(lower) + _TITLE_IN
    fig = plt.figure(figsize=(WIDTH_IN, height), layout="constrained", dpi=DPI)
    fig.suptitle(f"{title}\n{_overview(report, spell)}", fontsize=12)
    grid = fig.add_gridspec(1 + len(lower), 2, height_ratios=[_HIST_IN, *lower])
    _histograms(report, fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]))
    if per_step:  # shared step axis: subplots labels only the lowest panel's ticks
        rows = grid[1:, :].subgridspec(len(lower), 1, height_ratios=lower)
        _per_step(report, list(rows.subplots(sharex=True)))
    elif vary:
        _size_histogram(report, fig.add_subplot(grid[1, :]))
    return fig


def _overview(report: Report, spell: Spelling) -> str:
    """The title's second line: responses, groups and their size(s); a hint when there is
    no per-step table."""
    overall = report.overall.row(0, named=True) if report.overall.height else {}
    responses, groups = overall.get("responses", 0), overall.get("groups", 0)
    lo, hi = overall.get("group_size_min"), overall.get("group_size_max")
    if lo is None or hi is None:
        sizes = ""
    elif lo == hi:
        sizes = f", all of size {_num(lo)}"
    else:
        sizes = f" of size {_num(lo)} to {_num(hi)}"
    line = f"{responses:,} responses in {groups:,} groups{sizes}"
    if not (report.by and report.steps.height):
        by = option("by", (Verbatim("COL"),))
        line += "; no per-step column (give " + spell(by) + " for per-step curves)"
    return line


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"


def _histograms(report: Report, ax_adv: Any, ax_reward: Any) -> None:
    """The advantage histogram (one per method of a ``compare`` output; else the group
    reward std's) and the reward histogram."""
    if report.methods:
        _method_histograms(report.methods, ax_adv)
    elif report.advantages is not None and report.advantages.len():
        _hist(ax_adv, report.advantages, 50, _BLUE)
        shown = f"{report.advantages.len():,} responses{report.sample_note}"
        ax_adv.set(title=f"advantage ({shown})", xlabel="advantage")
    else:
        stds = report.group_sizes["std"].drop_nulls().drop_nans().to_numpy()
        ax_adv.hist(stds, bins=30, color=_PURPLE)
        shown = f"{len(stds):,} groups{report.sample_note}"
        ax_adv.set_title(f"group reward std ({shown}; the log has no advantage)")
        ax_adv.set_xlabel("std of the group's rewards")
    ax_adv.set_ylabel("count")
    _hist(ax_reward, report.rewards, 50, _GREEN)
    shown = f"{report.rewards.len():,} valid{report.sample_note}"
    ax_reward.set(title=f"reward ({shown})", xlabel="reward", ylabel="count")


def _method_histograms(methods: Mapping[str, Any], ax: Any) -> None:
    """One step histogram per method on the same 50 bins (over all methods' values)."""
    import numpy as np

    arrays = [np.asarray(v, dtype=float) for v in methods.values()]
    edges = np.histogram_bin_edges(np.concatenate(arrays), bins=50)
    colors = (_BLUE, _ORANGE, _GREEN, _RED, _PURPLE, _BROWN)
    for i, (name, values) in enumerate(zip(methods, arrays, strict=True)):
        ax.hist(values, bins=edges, histtype="step", color=colors[i % len(colors)], label=name)
    ax.set(title=f"advantage by method ({len(methods)} methods)", xlabel="advantage")
    ax.legend(**_LEGEND)


def _per_step(report: Report, axes: list[Any]) -> None:
    """The per-step panels on ``axes`` (reward, zero-std share, group sizes if given)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    steps = report.steps
    x = list(range(steps.height)) if len(report.by) > 1 else steps[report.by[0]].to_numpy()
    label = ", ".join(report.by) + (" (row number)" if len(report.by) > 1 else "")
    marker = "o" if steps.height <= 60 else None
    ax_reward, ax_zero = axes[:2]

    mean = steps["reward"].cast(float).to_numpy()
    std = steps["reward_std"].cast(float).fill_null(0.0).to_numpy()
    ax_reward.fill_between(
        *thinned_band(x, mean - std, mean + std),
        color=_GREEN,
        alpha=0.2,
        linewidth=0,
        label="± reward_std",
    )
    ax_reward.plot(
        *thinned(x, mean), color=_GREEN, marker=marker, markersize=3, label="reward (mean)"
    )
    _panel(ax_reward, f"reward per {', '.join(report.by)}", "reward")

    zero = steps["frac_reward_zero_std"].cast(float).to_numpy()
    ax_zero.plot(
        *thinned(x, zero), color=_RED, marker=marker, markersize=3, label="frac_reward_zero_std"
    )
    top = zero_std_top(zero)
    ax_zero.set_ylim(0.0, top)
    ax_zero.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:.3g}%"))
    ax_zero.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    finite = [v for v in zero if math.isfinite(v)]
    peak = max(finite) if finite else 0.0
    note = f"max {peak:.3g} = {peak * 100:.3g}%" if peak > 0 else "0 at every step"
    _panel(
        ax_zero, f"frac_reward_zero_std: share of responses in zero-std groups ({note})", "share"
    )

    if len(axes) > 2:
        ax_sizes = axes[2]
        lo = steps["group_size_min"].cast(float).to_numpy()
        hi = steps["group_size_max"].cast(float).to_numpy()
        band = thinned_band(x, lo, hi)
        ax_sizes.fill_between(*band, color=_BLUE, alpha=0.15, linewidth=0, label="min to max")
        for name, color in (
            ("group_size_max", _ORANGE),
            ("group_size_median", _BLUE),
            ("group_size_min", _BROWN),
        ):
            values = steps[name].cast(float).to_numpy()
            ax_sizes.plot(*thinned(x, values), color=color, marker=marker, markersize=3, label=name)
        _panel(ax_sizes, f"group sizes per {', '.join(report.by)}", "responses per group")

    axes[-1].set_xlabel(label)
    if len(report.by) > 1:
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    elif steps.schema[report.by[0]].is_numeric():
        axes[-1].xaxis.set_major_locator(FixedLocator(step_ticks(x)))


CURVE_BINS: Final = 2000  # runs of steps a long curve is drawn from (the figure: 1,320 px)


def _runs(count: int, bins: int) -> tuple[Any, Any]:
    """The first and last index of each of ``bins`` (or fewer) runs of consecutive points
    that cut ``count`` points."""
    import numpy as np

    size = -(-count // bins)
    starts = np.arange(0, count, size)
    return starts, np.minimum(starts + size - 1, count - 1)


def thinned(x: Any, y: Any, bins: int = CURVE_BINS) -> tuple[Any, Any]:
    """The points of the curve ``(x, y)`` that draw it at the figure's resolution: with more
    than 4 x ``bins`` points, in each of ``bins`` runs of consecutive points only the
    first, the lowest, the highest and the last, in order (a run is narrower than a pixel
    column, so the line covers the same pixels: every extreme is kept). NaN (a gap in the
    line) is kept where a run's values are all NaN, else dropped from the run."""
    import numpy as np

    x, y = np.asarray(x), np.asarray(y, dtype=float)
    if len(y) <= 4 * bins:
        return x, y
    starts, last = _runs(len(y), bins)
    size = int(starts[1] - starts[0])
    padded = len(starts) * size - len(y)
    missing = np.isnan(y)
    low = np.concatenate([np.where(missing, np.inf, y), np.full(padded, np.inf)])
    high = np.concatenate([np.where(missing, -np.inf, y), np.full(padded, -np.inf)])
    lowest = starts + low.reshape(-1, size).argmin(axis=1)
    highest = starts + high.reshape(-1, size).argmax(axis=1)
    keep = np.unique(np.concatenate([starts, lowest, highest, last]).clip(0, len(y) - 1))
    return x[keep], y[keep]


def thinned_band(x: Any, lo: Any, hi: Any, bins: int = CURVE_BINS) -> tuple[Any, Any, Any]:
    """The band between ``lo`` and ``hi`` over ``x`` at the figure's resolution: with more
    than 4 x ``bins`` points, each of ``bins`` runs of consecutive points drawn from its
    first to its last x between the lowest ``lo`` and the highest ``hi`` of the run (NaN
    left out), so the band covers every point's."""
    import numpy as np

    x, lo, hi = np.asarray(x), np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    if len(x) <= 4 * bins:
        return x, lo, hi
    starts, last = _runs(len(x), bins)
    lows = np.fmin.reduceat(lo, starts)
    highs = np.fmax.reduceat(hi, starts)
    return np.column_stack([x[starts], x[last]]).ravel(), lows.repeat(2), highs.repeat(2)


def _panel(ax: Any, title: str, ylabel: str) -> None:
    """A per-step panel's title (left), y label, legend (right of it) and y grid."""
    ax.set_title(title, loc="left", fontsize=10)
    ax.set_ylabel(ylabel)
    ax.legend(**_LEGEND)
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


MAX_STEP_TICKS: Final = 12


def step_ticks(steps: Any) -> list[float]:
    """The ticks of the step axis: the logged step values (5, 10, 15 are drawn as 5, 10,
    15, never 6, 8, ... 14), every k-th of them from the first when there are more than
    MAX_STEP_TICKS (k the smallest that leaves at most MAX_STEP_TICKS)."""
    values = [float(v) for v in steps]
    k = max(1, math.ceil(len(values) / MAX_STEP_TICKS))
    return values[::k]


def zero_std_top(values: Any) -> float:
    """The top of the ``frac_reward_zero_std`` axis (its bottom is 0): 15% above the
    largest value, at most 1.05; 0.05 when every value is 0 or missing."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    peak = max(finite, default=0.0)
    return min(peak * 1.15, 1.05) if peak > 0 else 0.05


def _size_histogram(report: Report, ax: Any) -> None:
    """Histogram of the group sizes (logs without a per-step table)."""
    from matplotlib.ticker import MaxNLocator

    sizes = report.group_sizes["size"].to_numpy()
    lo, hi = int(sizes.min()), int(sizes.max())
    # One bar per size when there are few sizes, else 50 bins.
    bins: Any = [v - 0.5 for v in range(lo, hi + 2)] if hi - lo <= 60 else 50
    ax.hist(sizes, bins=bins, color=_BLUE, edgecolor="white", linewidth=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    shown = f"{len(sizes):,} groups{report.sample_note}"
    ax.set_title(f"group sizes ({shown})", loc="left", fontsize=10)
    ax.set(xlabel="responses per group", ylabel="groups")


def write_dashboard(
    report: Report,
    path: Path,
    fmt: str,
    *,
    title: str = "grpo-adv",
    force: bool = False,
    spell: Spelling = keyword_spelling,
) -> None:
    """Draw the dashboard into ``path`` as ``fmt`` (png, svg, pdf or html), atomically
    (:func:`grpo_cli.io.atomic.atomic_write`; ``force``: replace what is there)."""
    from grpo_cli.io.atomic import atomic_write

    fig = figure(report, title, spell=spell)
    drawn, kind = io.BytesIO(), "svg" if fmt == "html" else fmt
    try:
        fig.savefig(drawn, format=kind, dpi=DPI, metadata=_SAVE_METADATA.get(kind))
    finally:
        _pyplot().close(fig)
    data = drawn.getvalue()
    if fmt == "html":
        data = html_page(report, data.decode(), title).encode()
    atomic_write(path, lambda sink: sink.writelines([data]), force=force)


def _html_table(frame: Any, css_class: str) -> str:
    """``frame`` as an HTML table in a scrolling wrapper; headers break after ``_``."""
    head = "".join(f"<th>{html.escape(c).replace('_', '_<wbr>')}</th>" for c in frame.columns)
    rows = []
    for record in frame.iter_rows():
        cells = "".join(f"<td>{html.escape(_cell(v))}</td>" for v in record)
        rows.append(f"<tr>{cells}</tr>")
    # Below about 6em a column would break its numbers: scroll instead.
    width = f' style="min-width:{6 * len(frame.columns)}em"' if css_class == "wide" else ""
    return (
        f'<div class="table-wrap"><table class="{css_class}"{width}>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


PAGE_CSS: Final = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em; }
svg { max-width: 100%; height: auto; }
.table-wrap { max-width: 100%; overflow-x: auto; margin-bottom: 1.5em; }
table { border-collapse: collapse; font-size: 13px; max-width: 100%; }
table.wide { table-layout: fixed; width: 100%; max-width: none; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right;
         overflow-wrap: anywhere; word-break: break-word; }
th { background: #f4f4f4; vertical-align: bottom; }
table.pairs td:first-child { text-align: left; }
"""


def html_page(report: Report, svg: str, title: str) -> str:
    """The HTML dashboard: ``title``, the SVG figure, the overall metrics (one row each)
    and the per-step table, styled by :data:`PAGE_CSS` to fit the page."""
    import polars as pl

    svg = svg[svg.find("<svg") :]
    overall = report.overall
    pairs = pl.DataFrame(
        {
            "metric": overall.columns,
            "value": [_cell(overall[c][0]) if overall.height else "" for c in overall.columns],
        }
    )
    steps = ""
    if report.by and report.steps.height:
        steps = f"<h2>per {html.escape(', '.join(report.by))}</h2>" + _html_table(
            report.steps, "wide"
        )
    return f"""<!doctype html>
<html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{PAGE_CSS}</style></head>
<body><h1>{html.escape(title)}</h1>
{svg}
<h2>overall</h2>{_html_table(pairs, "pairs")}
{steps}
</body></html>
"""

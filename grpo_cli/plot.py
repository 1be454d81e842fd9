"""``plot``: a dashboard of a :class:`grpo_cli.report.Report` as PNG, SVG or HTML.

Four panels: the advantage histogram (annotated logs; else the per-group reward std), the
reward histogram, and per-step curves: reward mean with its std band and the share of
zero-std responses (``frac_reward_zero_std``), and the group size min / median / max.
HTML embeds the SVG and the overall and per-step tables.

matplotlib is an optional extra (``pip install 'grpo-adv[plot]'``), imported only here and
only when a plot is drawn, with the non-interactive Agg backend.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import IO, Any, Final

from grpo_cli.errors import OptionsError
from grpo_cli.report import Report

PLOT_FORMATS: Final = {".png": "png", ".svg": "svg", ".html": "html", ".htm": "html"}
INSTALL_HINT: Final = "pip install 'grpo-adv[plot]' (matplotlib)"


def check_plot_path(path: Path) -> str:
    """The dashboard format from the suffix of ``path``."""
    fmt = PLOT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise OptionsError(
            f"cannot tell the plot format of {path}",
            hint="end the file name with .png, .svg or .html",
        )
    return fmt


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


def figure(report: Report, title: str = "") -> Any:
    """The dashboard as a matplotlib Figure."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True)
    fig.suptitle(f"grpo-adv: {title}" if title else "grpo-adv", fontsize=13)
    ax_adv, ax_reward, ax_steps, ax_sizes = axes.flat
    if report.advantages is not None and report.advantages.len():
        ax_adv.hist(report.advantages.to_numpy(), bins=50, color="#4C72B0")
        ax_adv.set_title(f"advantage ({report.advantages.len():,} responses)")
        ax_adv.set_xlabel("advantage")
    else:
        stds = report.groups["std"].drop_nulls().to_numpy()
        ax_adv.hist(stds, bins=30, color="#8172B2")
        ax_adv.set_title(f"group reward std ({len(stds):,} groups; log has no advantage)")
        ax_adv.set_xlabel("std of the group's rewards")
    ax_adv.set_ylabel("count")
    ax_reward.hist(report.rewards.to_numpy(), bins=50, color="#55A868")
    ax_reward.set_title(f"reward ({report.rewards.len():,} valid)")
    ax_reward.set_xlabel("reward")
    ax_reward.set_ylabel("count")
    if report.by and report.steps.height:
        steps = report.steps
        x = list(range(steps.height)) if len(report.by) > 1 else steps[report.by[0]].to_numpy()
        label = ", ".join(report.by)
        mean = steps["reward"].to_numpy()
        std = steps["reward_std"].fill_null(0.0).to_numpy()
        ax_steps.plot(x, mean, color="#55A868", label="reward (mean)")
        ax_steps.fill_between(
            x, mean - std, mean + std, color="#55A868", alpha=0.2, label="± reward_std"
        )
        ax_steps.set_xlabel(label)
        ax_steps.set_ylabel("reward")
        twin = ax_steps.twinx()
        twin.plot(
            x,
            steps["frac_reward_zero_std"].to_numpy(),
            color="#C44E52",
            label="frac_reward_zero_std",
        )
        twin.set_ylabel("frac_reward_zero_std", color="#C44E52")
        twin.set_ylim(0, 1)
        lines = ax_steps.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax_steps.legend(lines[0] + more[0], lines[1] + more[1], loc="best", fontsize=8)
        ax_steps.set_title(f"per {label}")
        for name, color in (
            ("group_size_max", "#DD8452"),
            ("group_size_median", "#4C72B0"),
            ("group_size_min", "#937860"),
        ):
            ax_sizes.plot(x, steps[name].to_numpy(), color=color, label=name)
        if len(report.by) > 1 or steps.schema[report.by[0]].is_integer():
            from matplotlib.ticker import MaxNLocator

            for ax in (ax_steps, ax_sizes):
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax_sizes.set_xlabel(label)
        ax_sizes.set_ylabel("responses per group")
        ax_sizes.set_title(f"group sizes per {label}")
        ax_sizes.legend(loc="best", fontsize=8)
    else:
        sizes = report.groups["size"].to_numpy()
        ax_steps.axis("off")
        ax_steps.text(0.5, 0.5, "no per-step column (give --by COL)", ha="center", va="center")
        ax_sizes.hist(sizes, bins=min(50, max(int(sizes.max()), 1)), color="#4C72B0")
        ax_sizes.set_title(f"group sizes ({len(sizes):,} groups)")
        ax_sizes.set_xlabel("responses per group")
        ax_sizes.set_ylabel("groups")
    return fig


def write_dashboard(report: Report, path: Path, fmt: str, *, title: str = "") -> None:
    """Draw the dashboard into ``path`` (atomically: nothing is left on failure)."""
    from grpo_cli.io import atomic_write

    fig = figure(report, title)
    plt = _pyplot()
    try:
        if fmt == "html":
            svg = io.StringIO()
            fig.savefig(svg, format="svg")
            page = _html_page(report, svg.getvalue(), title)

            def write(sink: IO[bytes]) -> None:
                sink.write(page.encode())

            atomic_write(path, write)
        else:

            def draw(sink: IO[bytes]) -> None:
                fig.savefig(sink, format=fmt, dpi=110)

            atomic_write(path, draw)
    finally:
        plt.close(fig)


def _html_table(frame: Any) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = []
    for record in frame.iter_rows():
        cells = "".join(f"<td>{html.escape(_cell(v))}</td>" for v in record)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def _html_page(report: Report, svg: str, title: str) -> str:
    svg = svg[svg.find("<svg") :]
    steps = _html_table(report.steps) if report.by and report.steps.height else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>grpo-adv: {html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}</style></head>
<body><h1>grpo-adv: {html.escape(title)}</h1>
{svg}
<h2>overall</h2>{_html_table(report.overall)}
{"<h2>per " + html.escape(", ".join(report.by)) + "</h2>" + steps if steps else ""}
</body></html>
"""

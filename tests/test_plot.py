"""`plot`'s dashboard: files of the right format, the install hint, the panels it draws
(checked on the matplotlib Figure), legends off the data, the title, PDF output, the HTML
page's CSS, the default output path, and a compare table's methods overlaid."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import OptionsError
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.report.plot import (
    PAGE_CSS,
    check_plot_path,
    dashboard_title,
    default_plot_path,
    figure,
    html_page,
    sizes_vary,
    step_ticks,
    zero_std_top,
)
from grpo_cli.report.summarize import Report, compared_advantages, summarize
from tests.conftest import (
    SAMPLE_DIR,
    SAMPLE_FILES,
    annotated_log,
    import_or_skip,
    with_damaged_column,
)

FLAT_SHARE = 4 / 1000  # one flat group of 4 among the 1000 responses of step 3


def _even_log(*, with_step: bool = True) -> pl.DataFrame:
    """5 steps of 250 groups of 4 distinct rewards; in step 3 one group is flat, so
    frac_reward_zero_std is 0.004 there and 0 elsewhere; every group has size 4."""
    steps, keys, rewards = [], [], []
    for step in range(1, 6):
        for g in range(250):
            values = [0.5] * 4 if (step == 3 and g == 0) else [0.1, 0.4, 0.6, 0.9 - g / 1000]
            steps += [step] * 4
            keys += [f"s{step}g{g}"] * 4
            rewards += values
    frame = pl.DataFrame({"step": steps, "prompt_id": keys, "reward": rewards})
    return frame if with_step else frame.drop("step")


def _report(frame: pl.DataFrame) -> Report:
    return summarize(frame, AdvantageOptions())


def _sample_report(*, with_step: bool = True) -> Report:
    frame = pl.read_parquet(SAMPLE_FILES["parquet"])
    return _report(frame if with_step else frame.drop("step"))


def _titled(fig: Any, text: str) -> list[Any]:
    return [ax for ax in fig.axes if text in ax.get_title(loc="left") + ax.get_title()]


@pytest.fixture
def plt() -> Any:
    import_or_skip("matplotlib")
    import matplotlib.pyplot

    yield matplotlib.pyplot
    matplotlib.pyplot.close("all")


@pytest.mark.slow
class TestFigure:
    def test_frac_reward_zero_std_has_its_own_axis_scaled_to_its_values(self, plt: Any) -> None:
        fig = figure(_report(_even_log()), "t")
        (ax,) = _titled(fig, "frac_reward_zero_std")
        (line,) = ax.get_lines()
        assert list(line.get_ydata()) == pytest.approx([0, 0, FLAT_SHARE, 0, 0])
        assert ax.get_ylim() == pytest.approx((0.0, FLAT_SHARE * 1.15))  # not (0, 1)
        assert "max 0.004 = 0.4%" in ax.get_title(loc="left")
        # its own panel: the reward curve is elsewhere, on its own y scale
        (reward,) = _titled(fig, "reward per step")
        assert ax is not reward and reward.get_ylim()[1] > 0.5
        assert [ln.get_label() for ln in reward.get_lines()] == ["reward (mean)"]
        assert ax.yaxis.get_major_formatter()(FLAT_SHARE, 0) == "0.4%"

    def test_zero_std_axis_top(self) -> None:
        assert zero_std_top([0.0, 0.003, None]) == pytest.approx(0.00345)
        assert zero_std_top([0.0, float("nan")]) == 0.05
        assert zero_std_top([1.0]) == 1.05

    def test_no_group_size_panel_when_every_group_has_the_same_size(self, plt: Any) -> None:
        report = _report(_even_log())
        assert not sizes_vary(report)
        fig = figure(report, "t")
        assert len(fig.axes) == 4  # two histograms, reward, frac_reward_zero_std
        assert _titled(fig, "group sizes") == []
        assert "1,250 groups, all of size 4" in fig.get_suptitle()
        flat = figure(_report(_even_log(with_step=False)), "t")
        assert len(flat.axes) == 2 and _titled(flat, "group sizes") == []

    def test_group_size_panel_when_sizes_vary(self, plt: Any) -> None:
        report = _sample_report()
        assert sizes_vary(report)
        fig = figure(report, "t")
        assert len(fig.axes) == 5
        (sizes,) = _titled(fig, "group sizes per step")
        assert [ln.get_label() for ln in sizes.get_lines()] == [
            "group_size_max",
            "group_size_median",
            "group_size_min",
        ]
        assert list(sizes.get_lines()[0].get_ydata()) == [16, 16, 16, 15]
        assert "64 groups of size 1 to 16" in fig.get_suptitle()
        # the step axis is shared and labelled once, on the lowest panel
        assert sizes.get_xlabel() == "step"
        assert _titled(fig, "reward per step")[0].get_xlabel() == ""
        no_step = figure(_sample_report(with_step=False), "t")
        assert len(no_step.axes) == 3
        (histogram,) = _titled(no_step, "group sizes (64 groups)")
        assert len(histogram.patches) == 16  # one bar per size, 1 to 16
        assert "no per-step column" in no_step.get_suptitle()

    @pytest.mark.parametrize("even", [True, False], ids=["even", "sample"])
    def test_legends_sit_outside_the_axes(self, plt: Any, even: bool) -> None:
        fig = figure(_report(_even_log()) if even else _sample_report(), "t")
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
        assert len(legends) == (2 if even else 3)
        canvas = fig.bbox
        for ax, legend in legends:
            box = legend.get_window_extent(renderer)
            data = ax.get_window_extent(renderer)
            assert box.x0 >= data.x1, ax.get_title(loc="left")  # right of the data area
            assert not box.overlaps(data)
            for other in fig.axes:  # and over no other panel
                assert other is ax or not box.overlaps(other.get_window_extent(renderer))
            assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1  # not cut off

    def test_title_names_inputs_and_preset_or_estimator(self, plt: Any) -> None:
        assert dashboard_title(["runs/rewards.adv.parquet"], preset="trl") == (
            "grpo-adv: rewards.adv.parquet (preset trl)"
        )
        assert dashboard_title(["a.csv"]) == "grpo-adv: a.csv (estimator grpo)"
        assert dashboard_title(["a.csv"], estimator="rloo") == "grpo-adv: a.csv (estimator rloo)"
        assert dashboard_title(["-", "b", "c", "d", "e"], preset="verl", estimator="rloo") == (
            "grpo-adv: standard input, b, c and 2 more (preset verl, estimator rloo)"
        )
        fig = figure(_sample_report(), "grpo-adv: x.parquet (preset trl)")
        assert fig.get_suptitle().splitlines()[0] == "grpo-adv: x.parquet (preset trl)"

    def test_figure_height_follows_the_panels(self, plt: Any) -> None:
        sizes = [
            tuple(figure(report, "t").get_size_inches())
            for report in (_sample_report(), _report(_even_log()), _sample_report(with_step=False))
        ]
        assert sizes == [(12.0, 11.0), (12.0, 9.0), (12.0, 6.2)]

    def test_compare_output_overlays_one_histogram_per_method(self, plt: Any) -> None:
        from grpo_cli.report.compare import compare, methods_from

        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        table = compare(frame, methods_from(["trl", "verl"], ["dr_grpo"]), {}).frame
        report = _report(table)
        assert list(report.methods) == ["trl", "verl", "dr_grpo"]
        assert report.methods["verl"].len() == table["advantage_verl"].drop_nulls().len() == 569
        fig = figure(report, "t")
        (ax,) = _titled(fig, "advantage by method")
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["trl", "verl", "dr_grpo"]
        steps = ax.patches
        assert len(steps) == 3 and all(p.get_fill() is False for p in steps)  # step outlines
        assert _titled(fig, "advantage (") == []  # in place of the one histogram
        # one advantage_ column (or none): the ordinary histogram
        one = table.select("prompt_id", "reward", "advantage_trl")
        assert compared_advantages(one) == {}
        plain = figure(_report(one.rename({"advantage_trl": "advantage"})), "t")
        assert _titled(plain, "advantage by method") == []


@pytest.mark.slow
class TestFiles:
    def test_pdf(self, runner: CliRunner, tmp_path: Path, plt: Any) -> None:
        assert check_plot_path(Path("r.PDF")) == "pdf"
        out = tmp_path / "report.pdf"
        result = runner.invoke(app, ["plot", str(SAMPLE_FILES["csv"]), "-o", str(out)])
        assert result.exit_code == 0, result.output
        data = out.read_bytes()
        assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
        assert len(data) > 10_000

    def test_title_threads_the_preset_and_estimator(
        self, runner: CliRunner, tmp_path: Path, plt: Any
    ) -> None:
        log = tmp_path / "rewards.adv.parquet"
        shutil.copyfile(SAMPLE_FILES["parquet"], log)
        for extra, title in (
            (["--preset", "trl"], "grpo-adv: rewards.adv.parquet (preset trl)"),
            ([], "grpo-adv: rewards.adv.parquet (estimator grpo)"),
            (["-e", "rloo"], "grpo-adv: rewards.adv.parquet (estimator rloo)"),
        ):
            out = tmp_path / "page.html"
            result = runner.invoke(app, ["plot", str(log), "-o", str(out), "-f", *extra])
            assert result.exit_code == 0, result.output
            assert f"<title>{title}</title>" in out.read_text()

    def test_unknown_estimator_is_refused_before_reading(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        out = tmp_path / "r.png"
        result = runner.invoke(app, ["plot", "missing.csv", "-o", str(out), "-e", "nope"])
        assert result.exit_code == 2
        assert "unknown estimator 'nope'" in result.output and not out.exists()

    def test_html_tables_fit_the_page(self, runner: CliRunner, tmp_path: Path, plt: Any) -> None:
        out = tmp_path / "report.html"
        result = runner.invoke(app, ["plot", str(SAMPLE_FILES["parquet"]), "-o", str(out)])
        assert result.exit_code == 0, result.output
        page = out.read_text()
        for rule in (
            "table-layout: fixed",
            "max-width: 100%",
            "overflow-x: auto",
            "overflow-wrap: anywhere",
            "svg { max-width: 100%; height: auto; }",
        ):
            assert rule in PAGE_CSS and rule in page, rule
        assert page.count('<div class="table-wrap"><table') == 2  # overall and per step
        assert '<div class="table-wrap"><table class="pairs"><thead>' in page
        assert "<th>frac_<wbr>reward_<wbr>zero_<wbr>std</th>" in page  # breaks at "_"
        # the overall metrics, one row each: 22 of the 570 responses are in zero-std groups
        assert f"<tr><td>frac_reward_zero_std</td><td>{22 / 570:.6g}</td></tr>" in page
        steps = _sample_report().steps
        assert f'<table class="wide" style="min-width:{6 * steps.width}em">' in page

    def test_html_page_without_steps(self) -> None:
        page = html_page(_sample_report(with_step=False), "<?xml?><svg></svg>", "t & u")
        assert "<title>t &amp; u</title>" in page and "<svg></svg>" in page
        assert page.count("<table") == 1 and "<h2>per" not in page


@pytest.mark.slow
class TestDefaultOutput:
    def test_beside_the_input(self, runner: CliRunner, tmp_path: Path, plt: Any) -> None:
        log = tmp_path / "rewards.adv.parquet"
        shutil.copyfile(SAMPLE_FILES["parquet"], log)
        result = runner.invoke(app, ["plot", str(log)])
        assert result.exit_code == 0, result.output
        out = tmp_path / "rewards.adv.report.png"
        assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert "dashboard written to" in result.output and "rewards.adv.report.png" in result.output
        again = runner.invoke(app, ["plot", str(log)])
        assert again.exit_code == 4  # an existing dashboard needs --force
        assert runner.invoke(app, ["plot", str(log), "-f", "-q"]).exit_code == 0

    def test_names(self, tmp_path: Path) -> None:
        gz = tmp_path / "r.jsonl.gz"
        with gzip.open(gz, "wb") as sink:
            sink.write(b'{"prompt_id": "a", "reward": 1}\n')
        assert default_plot_path([str(gz)]) == tmp_path / "r.report.png"
        folder = tmp_path / "logs"
        folder.mkdir()
        assert default_plot_path([str(folder)]) == tmp_path.resolve() / "logs.report.png"
        for sources in (["-"], [str(gz), str(gz)], [str(tmp_path / "*.jsonl.gz")]):
            with pytest.raises(OptionsError, match="needs -o PATH"):
                default_plot_path(sources)

    def test_a_folder_given_relative_is_named_relative(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / "logs").mkdir()
        monkeypatch.chdir(tmp_path)
        assert default_plot_path(["logs/"]) == Path("logs.report.png")
        monkeypatch.chdir(tmp_path / "logs")
        assert default_plot_path(["."]) == Path("../logs.report.png")

    def test_a_trl_dump_warns_of_the_inferred_group_size(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plt: Any
    ) -> None:
        shutil.copytree(SAMPLE_DIR / "trl_completions", tmp_path / "trl")
        monkeypatch.chdir(tmp_path)
        result = runner.invoke(app, ["plot", "trl", "--preset", "trl"])
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines() == [
            "warning: inferred --group-size 4 from runs of equal prompts (TRL num_generations)",
            "dashboard written to trl.report.png",
        ]
        assert (tmp_path / "trl.report.png").read_bytes().startswith(b"\x89PNG")

    @pytest.mark.parametrize("args", [[], ["-"]], ids=["piped", "dash"])
    def test_standard_input_needs_o(self, runner: CliRunner, args: list[str]) -> None:
        result = runner.invoke(app, ["plot", *args], input=SAMPLE_FILES["csv"].read_text())
        assert result.exit_code == 2
        assert "plot needs -o PATH" in result.output

    def test_standard_input_with_o(self, runner: CliRunner, tmp_path: Path, plt: Any) -> None:
        out = tmp_path / "r.svg"
        result = runner.invoke(
            app, ["plot", "-o", str(out), "-q"], input=SAMPLE_FILES["csv"].read_text()
        )
        assert result.exit_code == 0, result.output
        assert out.read_bytes().startswith(b"<?xml")


@pytest.mark.slow
def test_matplotlib_is_imported_only_to_draw() -> None:
    code = (
        "import sys, grpo_cli.report.plot, grpo_cli.cli.plot; "
        "assert 'matplotlib' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class TestStepTicks:
    """The step axis is labelled with the logged steps."""

    @staticmethod
    def _log(steps: list[int]) -> pl.DataFrame:
        rows = [(s, f"p{s}_{g}", r) for s in steps for g in range(2) for r in (0.0, 1.0, 0.5)]
        return pl.DataFrame(rows, schema=["step", "prompt_id", "reward"], orient="row")

    def test_ticks_are_the_logged_steps(self, plt: Any) -> None:
        fig = figure(_report(self._log([5, 10, 15])), "t")
        (zero,) = _titled(fig, "frac_reward_zero_std")
        assert list(zero.get_xticks()) == [5.0, 10.0, 15.0]
        assert [t.get_text() for t in zero.get_xticklabels()] == ["5", "10", "15"]

    def test_many_steps_take_every_kth_logged_step(self, plt: Any) -> None:
        steps = list(range(10, 310, 10))  # 30 steps: every 3rd, 10 ticks
        fig = figure(_report(self._log(steps)), "t")
        (zero,) = _titled(fig, "frac_reward_zero_std")
        assert list(zero.get_xticks()) == [float(s) for s in steps[::3]]
        assert step_ticks(range(1, 13)) == [float(s) for s in range(1, 13)]  # 12: all
        assert step_ticks(range(1, 14)) == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0]


@pytest.mark.slow
def test_plot_of_a_compare_table_overlays_the_methods(tmp_path: Path) -> None:
    from grpo_cli.report.summarize import read_report

    both = tmp_path / "both.parquet"
    args = ["compare", "sample_data/rewards.parquet", "-e", "grpo", "-e", "dr_grpo", "-q"]
    assert CliRunner().invoke(app, [*args, "-o", str(both)]).exit_code == 0
    report = read_report([both], None, {"advantage_col": "advantage_grpo"}, None, None)
    assert list(report.methods) == ["grpo", "dr_grpo"]
    written = pl.read_parquet(both)
    assert report.methods["dr_grpo"].len() == written["advantage_dr_grpo"].drop_nulls().len()
    result = CliRunner().invoke(app, ["plot", str(both), "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


MAGIC = {
    ".png": b"\x89PNG\r\n\x1a\n",
    ".svg": b"<?xml",
    ".pdf": b"%PDF-",
    ".html": b"<!doctype html>",
}


@pytest.mark.slow
class TestPlot:
    @pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf", ".html"])
    def test_dashboard_file(self, runner: CliRunner, tmp_path: Path, suffix: str) -> None:
        import_or_skip("matplotlib")
        annotated = tmp_path / "annotated.parquet"
        assert (
            runner.invoke(
                app, ["compute", str(SAMPLE_FILES["parquet"]), "-o", str(annotated), "-q"]
            ).exit_code
            == 0
        )
        out = tmp_path / f"report{suffix}"
        result = runner.invoke(app, ["plot", str(annotated), "-o", str(out)])
        assert result.exit_code == 0, result.output
        data = out.read_bytes()
        assert data.startswith(MAGIC[suffix])
        assert len(data) > 20_000  # five panels, not an empty canvas
        if suffix == ".html":
            text = data.decode()
            assert "<svg" in text and "frac_reward_zero_std" in text
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    def test_png_size(self, runner: CliRunner, tmp_path: Path) -> None:
        import_or_skip("matplotlib")
        import struct

        out = tmp_path / "r.png"
        assert runner.invoke(app, ["plot", str(SAMPLE_FILES["csv"]), "-o", str(out)]).exit_code == 0
        width, height = struct.unpack(">II", out.read_bytes()[16:24])
        assert (width, height) == (1320, 1210)  # five panels: 12 x 11 inches at 110 dpi

    def test_bad_suffix(self, runner: CliRunner, tmp_path: Path) -> None:
        result = runner.invoke(
            app, ["plot", str(SAMPLE_FILES["csv"]), "-o", str(tmp_path / "r.gif")]
        )
        assert result.exit_code == 2
        assert "cannot tell the plot format" in result.output
        assert ".png, .svg, .pdf or .html" in result.output
        assert not (tmp_path / "r.gif").exists()

    def test_missing_matplotlib_says_how_to_install(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        out = tmp_path / "r.png"
        result = runner.invoke(app, ["plot", str(SAMPLE_FILES["csv"]), "-o", str(out)])
        assert result.exit_code == 2
        assert "plot needs matplotlib" in result.output
        assert result.stderr.endswith(
            "hint: install it with: .venv/bin/pip install -e '.[plot]' (in the grpo-adv checkout)\n"
        )
        assert not out.exists()

    def test_existing_output_needs_force(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "r.svg"
        out.write_text("mine")
        result = runner.invoke(app, ["plot", str(SAMPLE_FILES["csv"]), "-o", str(out)])
        assert result.exit_code == 4
        assert out.read_text() == "mine"


def test_a_big_log_is_drawn_from_its_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plt: Any
) -> None:
    """A Parquet log over PIECE_ROWS rows, read in pieces (only the columns plot needs: a
    damaged one is never read): the figures of the log drawn whole; the histograms say
    they are of a sample."""
    from grpo_cli.report import pieces
    from grpo_cli.report.plot import run_plot

    frame = annotated_log(3000)
    frame.write_parquet(tmp_path / "whole.parquet")
    with_damaged_column(frame, tmp_path / "log.parquet")
    whole = run_plot([tmp_path / "whole.parquet"], tmp_path / "whole.svg")
    monkeypatch.setattr(pieces, "PIECE_ROWS", 700)  # 5 pieces
    pieced = run_plot([tmp_path / "log.parquet"], tmp_path / "log.svg")
    for level in ("overall", "steps"):
        got, want = getattr(pieced.report, level), getattr(whole.report, level)
        assert got.columns == want.columns and got.height == want.height
        for column in want.columns:
            assert got[column].to_numpy() == pytest.approx(
                want[column].to_numpy(), rel=1e-12, abs=1e-12
            )
    assert pieced.report.overall["responses"][0] == 3000
    drawn = [(tmp_path / f"{name}.svg").read_text() for name in ("whole", "log")]
    assert "a sample of whole groups" in drawn[1] and "a sample" not in drawn[0]


class TestLongCurves:
    """A per-step curve of more than 4 x CURVE_BINS steps is drawn from the points that show
    at the figure's resolution: a subsequence keeping every run's extremes, and the band's."""

    def test_thinned_keeps_the_ends_and_every_runs_extremes(self) -> None:
        import numpy as np

        from grpo_cli.report.plot import thinned

        rng = np.random.default_rng(7)
        for n, bins in ((1000, 250), (1001, 10), (4099, 37), (50_000, 100)):
            x = np.arange(n) * 3 + 5
            y = rng.normal(size=n)
            y[rng.integers(0, n, n // 20)] = np.nan
            y[n // 2 : n // 2 + 3 * (n // bins)] = np.nan  # whole runs of NaN: a gap
            tx, ty = thinned(x, y, bins)
            if n <= 4 * bins:
                assert tx.tolist() == x.tolist()
                continue
            assert len(tx) <= 4 * bins and tx[0] == x[0] and tx[-1] == x[-1]
            at = (tx - 5) // 3  # the kept points' indices: increasing, values unchanged
            assert (np.diff(at) > 0).all()
            assert np.array_equal(y[at], ty, equal_nan=True)
            size = -(-n // bins)
            for start in range(0, n, size):
                run = y[start : start + size]
                kept = ty[(at >= start) & (at < start + size)]
                if np.isnan(run).all():
                    assert np.isnan(kept).all() and len(kept) >= 1
                else:
                    assert np.nanmin(kept) == np.nanmin(run)
                    assert np.nanmax(kept) == np.nanmax(run)

    def test_thinned_band_covers_every_points_band(self) -> None:
        import numpy as np

        from grpo_cli.report.plot import thinned_band

        rng = np.random.default_rng(8)
        n, bins = 30_011, 200
        x = np.arange(n, dtype=float)
        lo = rng.normal(size=n)
        hi = lo + rng.random(n)
        lo[::97] = np.nan
        bx, blo, bhi = thinned_band(x, lo, hi, bins)
        assert len(bx) <= 2 * bins and bx[0] == x[0] and bx[-1] == x[-1]
        inside_lo = np.interp(x, bx, blo)  # the drawn band at every point's x
        inside_hi = np.interp(x, bx, bhi)
        keep = ~np.isnan(lo)
        assert (inside_lo[keep] <= lo[keep] + 1e-12).all()
        assert (inside_hi >= hi - 1e-12).all()
        small = thinned_band(x[:800], lo[:800], hi[:800], bins)  # short: as given
        for got, given in zip(small, (x[:800], lo[:800], hi[:800]), strict=True):
            assert np.array_equal(got, given, equal_nan=True)

    def test_a_thinned_curve_draws_the_same_picture(self, plt: Any) -> None:
        import io

        import numpy as np

        from grpo_cli.report.plot import DPI, WIDTH_IN, thinned, thinned_band

        rng = np.random.default_rng(0)
        n = 250_000  # a billion-row log's steps
        x = np.arange(n) * 4
        y = np.cumsum(rng.normal(size=n)) * 0.01 + rng.random(n) * 0.3

        def drawn(curve: tuple[Any, Any], band: tuple[Any, Any, Any]) -> Any:
            fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.8), dpi=DPI)
            ax.fill_between(*band, alpha=0.2, linewidth=0)
            ax.plot(*curve)
            ax.set_xlim(x[0], x[-1])
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=DPI)
            plt.close(fig)
            buffer.seek(0)
            return plt.imread(buffer)

        full = drawn((x, y), (x, y - 0.2, y + 0.2))
        thin = drawn(thinned(x, y), thinned_band(x, y - 0.2, y + 0.2))
        assert full.shape == thin.shape
        off = np.abs(full - thin).max(axis=2)
        assert (off > 0.2).mean() < 0.01  # antialiasing where segments overlap, no more
        assert len(thinned(x, y)[0]) < n / 25

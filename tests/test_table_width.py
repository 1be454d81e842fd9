"""Rich tables never cut a number or a header, at any width from 40 columns up.

A table that does not fit the console is wrapped into parts (the key columns repeated),
and a text cell wraps on whitespace; Rich's ellipsis never shows.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from grpo_cli import compute_advantages
from grpo_cli.cli import app
from grpo_cli.cli.render import (
    STEP_COLUMNS,
    _value,
    histogram_lines,
    number,
    render_report,
)
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.presets import presets_frame
from grpo_cli.report.summarize import Report, summarize
from tests.conftest import SAMPLE_FILES

WIDTHS = (40, 60, 80, 120)
ELLIPSIS = "…"
BOX_CHARS = "┏┃┡│└┌├┗┣"


def sample_report(annotated: bool) -> Report:
    """The summarize report of the sample log, raw or with its advantages computed."""
    frame = pl.read_parquet(SAMPLE_FILES["parquet"])
    if annotated:
        frame = compute_advantages(frame)
    return summarize(frame, AdvantageOptions())


def render(report: Report, width: int) -> str:
    """What ``summarize`` prints, on a console ``width`` columns wide that is no terminal."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False)
    render_report(console, report)
    return buffer.getvalue()


def cells(line: str, sep: str) -> list[str]:
    """The stripped cells of one table line: ``│ a │ b │`` -> ``["a", "b"]``."""
    return [cell.strip() for cell in line.strip().strip(sep).split(sep)]


def parse_tables(text: str) -> list[list[dict[str, str]]]:
    """Every table with a header (``┃`` lines) in ``text``: its rows as header -> cell."""
    tables: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("┃"):
            header = cells(stripped, "┃")
        elif stripped.startswith("│") and header is not None:
            row = cells(stripped, "│")
            assert len(row) == len(header), line
            rows.append(dict(zip(header, row, strict=True)))
        elif stripped.startswith("└") and header is not None:
            tables.append(rows)
            header, rows = None, []
    return tables


def two_column_rows(text: str) -> list[list[str]]:
    """The rows of the headerless tables: every ``│`` line that is not under a header."""
    found = []
    in_header_table = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("┏"):
            in_header_table = True
        elif stripped.startswith("└"):
            in_header_table = False
        elif stripped.startswith("│") and not in_header_table:
            found.append(cells(stripped, "│"))
    return found


@pytest.mark.parametrize("annotated", [False, True], ids=["raw", "annotated"])
@pytest.mark.parametrize("width", WIDTHS)
class TestSummarizeReport:
    def test_no_ellipsis_and_no_line_wider_than_the_console(
        self, width: int, annotated: bool
    ) -> None:
        text = render(sample_report(annotated), width)
        assert ELLIPSIS not in text
        too_wide = [line for line in text.splitlines() if cell_len(line) > width]
        assert too_wide == []

    def test_every_step_header_and_number_is_whole(self, width: int, annotated: bool) -> None:
        report = sample_report(annotated)
        shown = [c for c in (*report.by, *STEP_COLUMNS) if c in report.steps.columns]
        assert report.by == ("step",)
        assert ("advantage_mean" in shown) is annotated
        tables = parse_tables(render(report, width))
        assert tables, "no step table"
        headers = {name for table in tables for row in table for name in row}
        assert headers == set(shown)
        # each part repeats the step column; merged per step, a row is the whole record
        merged: dict[str, dict[str, str]] = {}
        for table in tables:
            for row in table:
                merged.setdefault(row["step"], {}).update(row)
        expected = {
            _value(record["step"]): {c: _value(record[c]) for c in shown}
            for record in report.steps.iter_rows(named=True)
        }
        assert merged == expected
        if annotated:  # a mean that is a rounding residue near 0 is written whole
            assert abs(float(merged["1"]["advantage_mean"])) < 1e-12

    def test_every_overall_figure_is_whole(self, width: int, annotated: bool) -> None:
        report = sample_report(annotated)
        rows = two_column_rows(render(report, width))
        expected = [[name, _value(v)] for name, v in report.overall.row(0, named=True).items()]
        assert rows == expected

    def test_sparkline_ends_are_whole(self, width: int, annotated: bool) -> None:
        report = sample_report(annotated)
        words = set(render(report, width).split())
        for name in ("reward", "reward_std", "frac_reward_zero_std", "group_size_median"):
            series = report.steps[name].drop_nulls().to_list()
            assert _value(series[0]) in words and _value(series[-1]) in words, name


def test_wide_console_keeps_one_step_table() -> None:
    text = render(sample_report(annotated=True), 200)
    assert len(parse_tables(text)) == 1
    assert "per step (4 values)" in [line.strip() for line in text.splitlines()]


def test_narrow_console_splits_the_step_table_and_numbers_its_parts() -> None:
    text = render(sample_report(annotated=True), 60)
    tables = parse_tables(text)
    assert len(tables) >= 2
    assert all(next(iter(table[0])) == "step" for table in tables)
    titles = [line.strip() for line in text.splitlines() if line.startswith("per step")]
    assert titles == [
        f"per step (4 values), part {i} of {len(tables)}" for i in range(1, len(tables) + 1)
    ]


def test_histogram_bars_fit_the_width() -> None:
    lines = histogram_lines([0.0, 0.5, 1.0], [10, 5], width=7)
    assert lines[0].endswith("  " + "█" * 7)
    assert lines[1].endswith("  " + "█" * 4)  # round(5 / 10 * 7)


class TestCli:
    def test_summarize_at_80_columns(self, runner: CliRunner) -> None:
        result = runner.invoke(
            app, ["summarize", str(SAMPLE_FILES["parquet"])], env={"COLUMNS": "80"}
        )
        assert result.exit_code == 0, result.output
        assert ELLIPSIS not in result.stderr
        for name in ("responses", "group_size_median", "frac_reward_zero_std", "group_reward_std"):
            assert f" {name} ┃" in result.stderr, name

    @pytest.mark.parametrize("width", [40, 60, 80])
    def test_compute_then_summarize_the_annotated_log(
        self, runner: CliRunner, tmp_path: Path, width: int
    ) -> None:
        out = tmp_path / "annotated.parquet"
        env = {"COLUMNS": str(width)}
        result = runner.invoke(
            app, ["compute", str(SAMPLE_FILES["parquet"]), "-o", str(out)], env=env
        )
        assert result.exit_code == 0, result.output
        assert ELLIPSIS not in result.stderr
        table_lines = [line for line in result.stderr.splitlines() if line[:1] in BOX_CHARS]
        assert table_lines and all(cell_len(line) <= width for line in table_lines)
        assert "0.5759 / 0.3942" in result.stderr  # reward mean / std
        assert "-2.846 / 3.175" in result.stderr  # advantage min / max
        # a text cell wraps between words: one of 20 cells stays whole, not folded
        assert {"zero-variance", "frac_reward_zero_std"} <= set(result.stderr.split())
        result = runner.invoke(app, ["summarize", str(out)], env=env)
        assert result.exit_code == 0, result.output
        assert ELLIPSIS not in result.stderr
        table_lines = [line for line in result.stderr.splitlines() if line[:1] in BOX_CHARS]
        assert all(cell_len(line) <= width for line in table_lines)
        residues = [word for word in result.stderr.split() if "e-" in word]
        assert residues, "advantage means near 0 are written in scientific notation"
        assert all(abs(float(word)) < 1e-12 for word in residues), residues  # whole

    @pytest.mark.parametrize("width", [40, 60])
    def test_verify_and_explain(self, runner: CliRunner, tmp_path: Path, width: int) -> None:
        out = tmp_path / "annotated.parquet"
        env = {"COLUMNS": str(width)}
        assert (
            runner.invoke(
                app, ["compute", str(SAMPLE_FILES["parquet"]), "-o", str(out), "-q"]
            ).exit_code
            == 0
        )
        result = runner.invoke(app, ["verify", str(out), "--preset", "trl"], env=env)
        assert ELLIPSIS not in result.stderr
        words = result.stderr.split()
        assert "570" in words and "inf" in words  # rows compared, the null reward's difference
        table_lines = [line for line in result.stderr.splitlines() if line[:1] in BOX_CHARS]
        assert table_lines and all(cell_len(line) <= width for line in table_lines)
        result = runner.invoke(app, ["explain", str(out), "--group", "p015"], env=env)
        assert result.exit_code == 0, result.output
        assert ELLIPSIS not in result.stdout  # explain's report is its output
        table_lines = [line for line in result.stdout.splitlines() if line[:1] in BOX_CHARS]
        assert table_lines and all(cell_len(line) <= width for line in table_lines)
        words = result.stdout.split()
        assert number(-1.89737, 6) in words and number(0.474342, 6) in words

    @pytest.mark.parametrize("width", [40, 60])
    def test_presets(self, runner: CliRunner, width: int) -> None:
        result = runner.invoke(app, ["presets"], env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.output
        assert ELLIPSIS not in result.output
        assert all(cell_len(line) <= width for line in result.output.splitlines())
        words = result.output.split()
        frame = presets_frame()
        for eps in frame["eps"]:  # "1e-08 (std)": the number is whole
            assert eps.split()[0] in words
        assert "conventions" in words and "reproduces" in words  # headers, never folded
        if width >= 60:  # the preset names, up to 27 characters, fit beside the field name
            assert set(frame["preset"]) <= set(words)

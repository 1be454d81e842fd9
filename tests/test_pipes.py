"""Pipes both ways: standard input in, standard output out, and what each command
writes where."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app


class TestPipes:
    def test_no_input_reads_a_piped_stdin(self) -> None:
        log = "\n".join(json.dumps({"prompt_id": "a", "reward": r}) for r in (1.0, 0.0, 0.5))
        result = CliRunner().invoke(app, ["compute", "-q"], input=log + "\n")
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [row["advantage"] for row in rows] == pytest.approx([1.0, -1.0, 0.0], abs=1e-7)

    def test_no_input_at_a_terminal_is_a_usage_error(self) -> None:
        code = (
            "import sys; sys.stdin.isatty = lambda: True\n"
            "from grpo_cli.cli import main\n"
            "sys.argv = ['grpo-adv', 'summarize']\n"
            "main()\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.splitlines()[0] == "error: no INPUT given"

    @pytest.mark.parametrize(
        ("fmt", "first"),
        [
            (None, "step,responses,groups"),
            ("md", "| step | responses | groups"),
            ("jsonl", '{"step":1,"responses":145'),
        ],
    )
    def test_summarize_table_to_stdout(self, fmt: str | None, first: str) -> None:
        args = ["summarize", "sample_data/rewards.parquet", "-o", "-", "-q"]
        result = CliRunner().invoke(app, args + (["--output-format", fmt] if fmt else []))
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(first)
        assert len(result.stdout.splitlines()) >= 3

    def test_compute_summary_to_stdout(self, tmp_path: Path) -> None:
        out = tmp_path / "o.parquet"
        args = ["compute", "sample_data/rewards.parquet", "-o", str(out), "--summary", "-", "-q"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        table = pl.read_csv(result.stdout.encode())
        assert table.columns[:3] == ["step", "prompt_id", "size"]
        assert table["size"].sum() == pl.read_parquet(out).height
        both = CliRunner().invoke(app, [*args[:2], "-o", "-", "--summary", "-"])
        assert both.exit_code == 2
        assert "both go to standard output" in both.output

    @pytest.mark.parametrize("fmt", ["jsonl", "json", "md"])
    def test_compute_summary_format(self, tmp_path: Path, fmt: str) -> None:
        out = tmp_path / "o.parquet"
        args = ["compute", "sample_data/rewards.parquet", "-o", str(out), "-q"]
        result = CliRunner().invoke(app, [*args, "--summary", "-", "--summary-format", fmt])
        assert result.exit_code == 0, result.output
        groups = pl.read_parquet(out).group_by("prompt_id").len()
        if fmt == "md":
            lines = result.stdout.splitlines()
            assert lines[0].startswith("| step | prompt_id") and set(lines[1]) <= {
                "|",
                "-",
                ":",
                " ",
            }
            assert len(lines) == 2 + groups.height
            return
        records = (
            [json.loads(line) for line in result.stdout.splitlines()]
            if fmt == "jsonl"
            else json.loads(result.stdout)
        )
        sizes = {r["prompt_id"]: r["size"] for r in records}
        assert sizes == dict(groups.iter_rows())
        # a file in the asked format, whatever its suffix says
        table = tmp_path / "groups.txt"
        named = CliRunner().invoke(
            app, [*args, "--force", "--summary", str(table), "--summary-format", fmt]
        )
        assert named.exit_code == 0, named.output
        assert table.read_text() == result.stdout

    def test_summary_format_needs_summary(self, tmp_path: Path) -> None:
        args = ["compute", "sample_data/rewards.csv", "-o", str(tmp_path / "o.csv")]
        result = CliRunner().invoke(app, [*args, "--summary-format", "md"])
        assert result.exit_code == 2
        assert "--summary-format" in result.output and "--summary PATH" in result.output
        assert not (tmp_path / "o.csv").exists()

    def test_out_dir_is_created(self, tmp_path: Path) -> None:
        target = tmp_path / "new" / "folder"
        args = ["compute", "sample_data/rewards.csv", "--out-dir", str(target), "-q"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert [p.name for p in target.iterdir()] == ["rewards.adv.csv"]

    def test_presets_as_json(self) -> None:
        result = CliRunner().invoke(app, ["presets", "--format", "json"])
        assert result.exit_code == 0
        presets = json.loads(result.stdout)
        by_name = {p["preset"]: p for p in presets}
        assert by_name["trl"]["eps"] == "0.0001 (std)" and by_name["verl"]["layout"] == "verl"
        assert len(presets) == len(by_name) >= 15

"""--replace: recomputing over a dump's own advantage column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app


class TestReplace:
    LOG = pl.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b"],
            "advantage": [9.0, 9.0, 9.0, 9.0],  # the dump's own, to be recomputed
            "reward": [1.0, 0.0, 0.5, 0.5],
        }
    )

    def test_refused_with_a_hint_that_names_replace(self, tmp_path: Path) -> None:
        source = tmp_path / "dump.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(app, ["compute", str(source), "-o", str(tmp_path / "o.csv")])
        assert result.exit_code == 3
        assert "hint: pass --replace to overwrite it" in result.output
        assert not (tmp_path / "o.csv").exists()

    def test_recomputes_in_place(self, tmp_path: Path) -> None:
        source, out = tmp_path / "dump.parquet", tmp_path / "o.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(app, ["compute", str(source), "-o", str(out), "--replace"])
        assert result.exit_code == 0, result.output
        written = pl.read_parquet(out)
        assert written.columns == ["prompt_id", "advantage", "reward"]
        a = 0.5 / (np.sqrt(0.5) + 1e-8)
        assert written["advantage"].to_list() == pytest.approx([a, -a, 0.0, 0.0], abs=1e-12)

    def test_file_engines_refuse_it(self, tmp_path: Path) -> None:
        source = tmp_path / "dump.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(
            app, ["compute", str(source), "--low-memory", "--replace", "-o", str(tmp_path / "o")]
        )
        assert result.exit_code == 2
        assert "--replace works with the in-memory engines" in result.output

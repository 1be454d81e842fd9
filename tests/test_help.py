"""Help that teaches: every command's help has option panels, one way to show defaults, a
readable usage line and 3-5 examples, and every example runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.help import EXAMPLES
from tests.conftest import ROOT, SAMPLE_DIR

COMMANDS = ("compute", "verify", "summarize", "plot", "explain", "presets", "compare")


def help_of(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_panels_one_default_style_and_examples(command: str) -> None:
    text = help_of(command)
    assert "[default:" not in text  # defaults are written "Default: X."
    assert "<list[str]>" not in text and "INPUT...}" not in text
    assert "\nHelp:\n" in text and "\nExamples:\n" in text.replace("  Examples:", "Examples:")
    assert 3 <= len(EXAMPLES[command]) <= 5
    for line, _ in EXAMPLES[command]:
        assert line in text
    if command not in ("presets", "compare"):
        assert ("\nInput:\n" in text and "\nOutput:\n" in text) or command == "explain"


def test_compute_help_groups_its_options() -> None:
    text = help_of("compute")
    panels = [
        line[:-1]
        for line in text.splitlines()
        if line and line.endswith(":") and not line.startswith(" ")
    ]
    assert panels == [
        "Arguments", "Input", "Estimator and policies", "Batch and layout", "Output", "Engine",
        "Help",
    ]  # fmt: skip
    assert "Usage: grpo-adv compute [OPTIONS] [INPUT]..." in text
    assert "--device DEVICE" in text and "Default: auto." in text


EXAMPLE_LINES = [line for examples in EXAMPLES.values() for line, _ in examples]


@pytest.mark.parametrize("example", EXAMPLE_LINES)
def test_every_example_runs(example: str, tmp_path: Path) -> None:
    shutil.copytree(SAMPLE_DIR, tmp_path / "sample_data")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "grpo-adv"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m grpo_cli "$@"\n')
    launcher.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {example}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode in (0, 1) if "verify" in example else done.returncode == 0, done.stderr

"""Shell completion: the candidates a shell gets (Click's and Typer's spellings of the
completion variable), and ``--install-completion SHELL`` installs that shell's completion,
not the detected one's. Each run gets a temporary HOME: nothing of the user's is touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from tests.conftest import ROOT


def _grpo_adv(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "grpo_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


SPELLINGS = [["--install-completion", "zsh"], ["--install-completion=zsh"]]


@pytest.mark.slow
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_install_completion_zsh_installs_zsh(tmp_path: Path, spelling: list[str]) -> None:
    done = _grpo_adv(tmp_path, *spelling)
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".zfunc" / "_grpo-adv"
    assert script.read_text().startswith("#compdef grpo-adv")
    assert "_GRPO_ADV_COMPLETE=complete_zsh" in script.read_text()
    assert "fpath+=~/.zfunc" in (tmp_path / ".zshrc").read_text()
    assert not (tmp_path / ".bashrc").exists()  # the calling shell is bash: untouched
    assert not (tmp_path / ".bash_completions").exists()
    assert f"zsh completion installed in {script}" in done.stdout


@pytest.mark.slow
def test_install_completion_fish_and_show_completion(tmp_path: Path) -> None:
    done = _grpo_adv(tmp_path, "--install-completion", "FISH")
    assert done.returncode == 0, done.stderr
    fish = tmp_path / ".config" / "fish" / "completions" / "grpo-adv.fish"
    assert "_GRPO_ADV_COMPLETE=complete_fish" in fish.read_text()
    shown = _grpo_adv(tmp_path, "--show-completion", "zsh")
    assert shown.returncode == 0 and shown.stdout.startswith("#compdef grpo-adv")


@pytest.mark.slow
def test_unknown_shell_is_a_usage_error(tmp_path: Path) -> None:
    done = _grpo_adv(tmp_path, "--install-completion", "tcsh")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: no completion for the shell 'tcsh'",
        "hint: choose one of: bash, zsh, fish, powershell, pwsh",
    ]
    assert list(tmp_path.iterdir()) == []


GRPO_ADV = str(Path(sys.executable).with_name("grpo-adv"))


def complete(line: str) -> list[str]:
    """What bash completion offers for the last word of ``line``."""
    words = line.split(" ")
    env = {
        **os.environ,
        "_GRPO_ADV_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = subprocess.run([GRPO_ADV], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.slow
class TestCompletion:
    def test_preset_names(self) -> None:
        assert complete("grpo-adv compute log.parquet --preset trl") == [
            "trl", "trl-batch", "trl-none", "trl-gdpo",
        ]  # fmt: skip

    def test_estimator_backend_and_format_names(self) -> None:
        assert complete("grpo-adv compute x -e rl") == ["rloo"]
        assert complete("grpo-adv verify x --backend p") == ["polars", "partitioned"]
        assert complete("grpo-adv compute x --format j") == ["jsonl", "json"]
        assert complete("grpo-adv compute x --singleton v") == ["verl"]

    def test_commands_and_scripts(self) -> None:
        assert complete("grpo-adv ex") == ["explain"]
        for spelling in ("source_bash", "bash_source"):  # Typer's and Click's
            env = {**os.environ, "_GRPO_ADV_COMPLETE": spelling}
            done = subprocess.run([GRPO_ADV], capture_output=True, text=True, env=env, timeout=60)
            assert "complete -o default -F _grpo_adv_completion grpo-adv" in done.stdout
        shown = CliRunner().invoke(app, ["--help"])
        assert "--install-completion" in shown.output and "--show-completion" in shown.output

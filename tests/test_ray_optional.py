"""Without Ray installed, ``--backend ray`` says how to install it (this runs whether or not
Ray is installed: Ray is hidden from the child process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import import_or_skip


@pytest.mark.slow
def test_without_ray_installed(tmp_path: Path) -> None:
    """Ray missing: the one-line install hint, exit 2, nothing written."""
    source = tmp_path / "in.parquet"
    pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]}).write_parquet(source)
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from grpo_cli.cli import main\n"
        f"sys.argv = ['grpo-adv', 'compute', {str(source)!r}, '--backend', 'ray', "
        f"'-o', {str(tmp_path / 'out')!r}]\n"
        "main()\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --backend ray needs Ray, which is not installed",
        "hint: install it with: .venv/bin/pip install -e '.[ray]' (in the grpo-adv checkout)",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


@pytest.mark.slow
def test_the_skipped_ray_tests_say_how_to_run_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make test`` without Ray lists the skip reason (pytest -ra): the install command."""
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(pytest.skip.Exception) as info:
        import_or_skip("ray")
    assert (
        info.value.msg == "needs ray: .venv/bin/pip install -e '.[ray]' (in the grpo-adv checkout)"
    )

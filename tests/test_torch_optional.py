"""The torch path without torch: lazy import, install hint, clear errors (run everywhere)."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
from typing import Any

import pytest

from grpo_cli import compute_advantages
from grpo_cli.core.errors import OptionsError
from tests.conftest import ROOT, SAMPLE_FILES
from tests.test_presets import hostile_log


@pytest.mark.slow
def test_polars_path_never_imports_torch() -> None:
    code = (
        "import sys, polars as pl; from grpo_cli.jobs.pipeline import annotate; "
        f"annotate(pl.read_parquet({str(SAMPLE_FILES['parquet'])!r})); "
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout == "False\n"


@pytest.mark.parametrize("estimator", ["grpo", "gpg"])
def test_missing_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch, estimator: str) -> None:
    """Whatever the estimator (the torch engine refuses none), a missing torch is the one
    error, with the install hint."""
    real_import = builtins.__import__

    def no_torch(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(OptionsError) as info:
        compute_advantages(hostile_log(), backend="torch", estimator=estimator)
    assert info.value.message == 'backend="torch" needs PyTorch, which is not installed'
    assert info.value.hint == (
        "install it with: .venv/bin/pip install -e '.[torch]' (in the grpo-adv checkout)"
    )

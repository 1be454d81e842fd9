"""Shared fixtures: a CLI runner, tiny hand-built logs and the sample files by format."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import polars as pl
import pytest
from hypothesis import settings
from typer.testing import CliRunner

from grpo_cli.core.errors import GrpoAdvError, Message, as_text, install_command

# Property tests: random exploration locally (new examples each run, failures remembered in
# .hypothesis/); in CI (CI=true) a fixed, derandomized search, so a submission never fails
# by chance. HYPOTHESIS_PROFILE=ci reproduces CI's examples locally.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev")
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "sample_data"
SAMPLE_FILES = {
    "parquet": SAMPLE_DIR / "rewards.parquet",
    "csv": SAMPLE_DIR / "rewards.csv",
    "jsonl": SAMPLE_DIR / "rewards.jsonl",
}


EXTRAS = {"torch": "torch", "ray": "ray", "matplotlib": "plot", "trl": "trl", "verl": "verl"}
SLOW_MODULES = ("test_ray_engine.py", "test_lowmem.py")
"""Test files whose every test starts processes (a Ray, the --low-memory worker)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_MODULES` ``slow``, as other files mark theirs one by
    one: ``pytest -m "not slow"`` (make test-fast) is the inner loop."""
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def import_or_skip(module: str) -> ModuleType:
    """The optional dependency ``module`` (torch, ray, matplotlib), or a skip whose reason
    (shown by ``make test``: pytest -ra) names the command that installs it."""
    extra = EXTRAS[module]
    found: ModuleType = pytest.importorskip(
        module, reason=f"needs {module}: {install_command(extra)}"
    )
    return found


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def width_80(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that reads cells of a rendered table pins the width it reads them at: 80
    columns, Rich's width off a terminal. Nothing else may depend on the width (CI runs
    the suite under a narrow COLUMNS and a long temporary path)."""
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture
def sample_copy(tmp_path: Path) -> dict[str, Path]:
    """The sample files copied into a temporary folder (outputs land beside them)."""
    copies = {}
    for fmt, path in SAMPLE_FILES.items():
        target = tmp_path / path.name
        shutil.copyfile(path, target)
        copies[fmt] = target
    return copies


def make_log(groups: dict[str, list[float | None]]) -> pl.DataFrame:
    """A log with one row per reward, grouped by ``prompt_id``, in the order given."""
    prompt_ids = [key for key, rewards in groups.items() for _ in rewards]
    rewards = [r for values in groups.values() for r in values]
    return pl.DataFrame(
        {"prompt_id": prompt_ids, "reward": rewards},
        schema={"prompt_id": pl.String, "reward": pl.Float64},
    )


@pytest.fixture
def tiny_log() -> pl.DataFrame:
    """A singleton group, a zero-variance group, a group with a null, a normal group."""
    return make_log(
        {
            "single": [0.7],
            "flat": [1.0, 1.0, 1.0],
            "with_null": [1.0, None, 0.0, 0.5],
            "normal": [1.0, 0.0, 0.0, 1.0],
        }
    )


def load_script(name: str) -> ModuleType:
    """Import one of sample_data's generator scripts by file name."""
    spec = importlib.util.spec_from_file_location(name, SAMPLE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(example: str, folder: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """Run a documented command line (README, --help examples) as a user would, from a copy
    of the sample data in ``folder``, with ``grpo-adv`` on the PATH."""
    shutil.copytree(SAMPLE_DIR, folder / "sample_data")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "grpo-adv"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m grpo_cli "$@"\n')
    launcher.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {example}"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def cli_text(message: Message | None) -> str:
    """``message`` as the command line shows it (options named by their flags)."""
    from grpo_cli.cli.params import flag_spelling

    return as_text(message or "").render(flag_spelling)


def cli_error(error: GrpoAdvError) -> tuple[str, str | None]:
    """The message and hint of ``error`` as the command line shows them."""
    from grpo_cli.cli.params import flag_spelling

    return error.render(flag_spelling)


def token_dump(folder: Path, column: str = "advantages", differ: int | None = None) -> Path:
    """The sample verl dump in ``folder`` with its advantages as verl's tensor: ``column``, a
    list per response of 3 tokens, each its response's advantage; with ``differ``, that
    input row's last token is 0.5 instead (token-level advantages)."""
    folder.mkdir()
    offset = 0
    for path in sorted((SAMPLE_DIR / "verl_dump").iterdir()):
        frame = pl.read_ndjson(path)
        tokens = pl.col("advantage").repeat_by(3)
        if differ is not None:
            row = pl.int_range(pl.len()) + offset == differ
            varied = pl.concat_list(pl.col("advantage").repeat_by(2), pl.lit(0.5))
            tokens = pl.when(row).then(varied).otherwise(tokens)
        frame = frame.with_columns(tokens.alias("tokens")).drop("advantage")
        frame.rename({"tokens": column}).write_ndjson(folder / path.name)
        offset += frame.height
    return folder


def annotated_log(rows: int, *, seed: int = 3, binary: bool = False) -> pl.DataFrame:
    """An annotated log of ``rows`` rows over 4 steps: prompts of about 6 rows (some of
    one) in random order, rewards binary (``binary``) or in [0, 1] with nulls, a
    ``length`` column and compute's advantages."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, rows // 6, rows)
    reward = rng.integers(0, 2, rows).astype(float) if binary else rng.random(rows).round(2)
    frame = pl.DataFrame(
        {
            "step": prompt % 4,
            "prompt_id": [f"p{p}" for p in prompt],
            "reward": pl.Series(reward).scatter(rng.integers(0, rows, 0 if binary else 9), None),
            "length": rng.integers(10, 500, rows),
        }
    )
    from grpo_cli import compute_advantages

    return compute_advantages(frame)


def with_damaged_column(frame: pl.DataFrame, path: Path) -> Path:
    """``frame`` written to ``path`` with a text column ``note`` whose pages' headers are
    overwritten: a reader that loads every column fails; one that reads only the others
    does not (the footer is intact)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    note = pa.array([f"note {i}" for i in range(frame.height)])
    table = frame.to_arrow().append_column("note", note)
    pq.write_table(table, path, compression="none", use_dictionary=False)
    data = bytearray(path.read_bytes())
    meta = pq.ParquetFile(path).metadata
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(table.num_columns - 1)
        data[chunk.data_page_offset : chunk.data_page_offset + 24] = b"\xff" * 24
    path.write_bytes(bytes(data))
    return path

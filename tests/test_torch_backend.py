"""The torch path: parity with the Polars path, clear errors, and lazy import."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli import compute_advantages
from grpo_cli.cli import app
from grpo_cli.engines.torch import SUPPORTED
from grpo_cli.errors import OptionsError
from grpo_cli.pipeline import annotate
from tests.conftest import SAMPLE_FILES
from tests.test_presets import hostile_log

torch = pytest.importorskip("torch")

POLICIES: list[dict[str, Any]] = [
    {},
    {"ddof": 0},
    {"eps_mode": "var", "eps": 1e-3},
    {"eps_mode": "var_floor", "eps": 0.5},
    {"singleton": "raw"},
    {"singleton": "null"},
    {"singleton": "verl", "eps": 1e-6},
    {"singleton": "formula"},
    {"nulls": "zero"},
    {"nulls": "fill_zero"},
    {"clip": (-0.5, 0.5)},
    {"batch_col": "step"},
    {"reward_cols": ("reward", "format_reward"), "reward_weights": (1.0, 0.5)},
]


@pytest.mark.parametrize("estimator", SUPPORTED)
@pytest.mark.parametrize(
    "policy", POLICIES, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults"
)
def test_torch_matches_polars(estimator: str, policy: dict[str, Any]) -> None:
    log = hostile_log(with_nulls=True)
    polars_run = compute_advantages(log, estimator=estimator, deterministic=True, **policy)
    torch_run = compute_advantages(
        log, estimator=estimator, backend="torch", device="cpu", **policy
    )
    a, b = polars_run["advantage"], torch_run["advantage"]
    assert a.is_null().to_list() == b.is_null().to_list()
    diff = (a - b).abs().max()
    assert diff is None or diff <= 1e-12  # type: ignore[operator]


def test_torch_run_summary_matches() -> None:
    log = hostile_log(with_nulls=True)
    on_torch = annotate(log, backend="torch", device="cpu").run
    on_polars = annotate(log).run
    for name in (
        "rows",
        "groups",
        "group_size_min",
        "group_size_max",
        "zero_std_groups",
        "singleton_groups",
        "null_rewards",
    ):
        assert getattr(on_torch, name) == getattr(on_polars, name), name
    assert on_torch.advantage_max == pytest.approx(on_polars.advantage_max, rel=1e-12)


def test_cuda_without_cuda_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(OptionsError) as info:
        compute_advantages(hostile_log(), backend="torch", device="cuda")
    assert info.value.message == 'device="cuda": torch sees no CUDA device'


def test_cli_torch_backend(runner: CliRunner) -> None:
    args = [
        "compute",
        str(SAMPLE_FILES["parquet"]),
        "-o",
        "-",
        "--output-format",
        "jsonl",
        "-q",
        "--backend",
        "torch",
        "--device",
        "cpu",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    got = pl.read_ndjson(result.stdout.encode())["advantage"]
    expected = compute_advantages(pl.read_parquet(SAMPLE_FILES["parquet"]))["advantage"]
    assert (got - expected).abs().max() <= 1e-12  # type: ignore[operator]


def test_a_hash_collision_falls_back_to_the_exact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one collision fallback (grpo_cli.plan.run_with_fallback) serves torch too."""
    import grpo_cli.engines.torch as engine
    import grpo_cli.plan as plan

    runs: list[bool] = []
    real_columns = engine.torch_columns

    def recording(frame: pl.DataFrame, options: Any, keys: Any) -> pl.DataFrame:
        runs.append(keys.hashed)
        return real_columns(frame, options, keys)

    monkeypatch.setattr(engine, "torch_columns", recording)
    monkeypatch.setattr(plan, "hash_collision", lambda frame, keys: keys.hashed)
    log = hostile_log(with_nulls=True)
    fallback = compute_advantages(log, backend="torch", device="cpu")["advantage"]
    assert runs == [True, False]  # hashed, then again on the exact key
    expected = compute_advantages(log, deterministic=True)["advantage"]
    assert (fallback - expected).abs().max() <= 1e-12  # type: ignore[operator]

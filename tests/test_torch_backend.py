"""The torch path: parity with the Polars path, clear errors, and lazy import."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli import compute_advantages
from grpo_cli.cli import app
from grpo_cli.core.errors import OptionsError
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.presets import PRESETS
from grpo_cli.jobs.pipeline import annotate
from tests.conftest import ROOT, SAMPLE_FILES, import_or_skip
from tests.test_presets import hostile_log
from tests.test_tensor_api import refused

torch = import_or_skip("torch")

# Every policy, alone or where two meet (each run on every estimator, Polars vs torch).
POLICIES: list[dict[str, Any]] = [
    {},
    {"ddof": 0},
    {"eps_mode": "var", "eps": 1e-3},
    {"eps_mode": "var_floor", "eps": 0.5},
    {"eps_mode": "var_floor", "eps": 0.5, "singleton": "formula"},
    {"singleton": "zero"},
    {"singleton": "raw"},
    {"singleton": "null"},
    {"singleton": "verl", "eps": 1e-6},
    {"singleton": "formula"},
    {"singleton": "formula", "ddof": 0},
    {"singleton": "drop"},
    {"nulls": "zero"},
    {"nulls": "fill_zero"},
    {"clip": (-0.5, 0.5)},
    {"clip": (-0.5, 0.5), "clip_stage": "shaped"},
    {"token_weighted": True},
    {"token_weighted": True, "ddof": 0, "batch_col": "step"},
    {"batch_col": "step"},
    {"reward_cols": ("reward", "format_reward"), "reward_weights": (1.0, 0.5)},
    {"aggregation": "normalize_then_sum", "reward_cols": ("reward", "format_reward")},
    {"eps_mode": "positive_std", "eps": 1e-6},
    {"eps_mode": "center"},
    {"reward_clip": (0.0, 0.5)},
    {"whiten": True},
    {"whiten": True, "whiten_ddof": 0, "whiten_eps": 0.0, "whiten_eps_mode": "positive_std"},
    {"whiten": True, "whiten_eps_mode": "center", "clip": (-0.5, 0.5), "clip_stage": "shaped"},
    {"whiten": True, "whiten_eps": 1e-5, "whiten_eps_mode": "std", "token_weighted": True},
    {
        "aggregation": "normalize_then_sum",
        "reward_cols": ("reward", "format_reward"),
        "reward_clip": (0.0, 0.5),
        "whiten": True,
        "whiten_eps": 0.0,
        "whiten_eps_mode": "positive_std",
    },
]


def parity_log() -> pl.DataFrame:
    """The hostile log (a zero-variance group, a tie for the maximum, singletons, null
    rewards) with the columns every estimator may read: ``length``, a ``baseline`` (one
    null) and step rewards (an empty list, a null list, a null step)."""
    log = hostile_log(with_nulls=True)
    steps: list[list[float | None] | None] = []
    for i, (reward, extra) in enumerate(zip(log["reward"], log["format_reward"], strict=True)):
        first = 0.5 if reward is None else reward
        steps.append(None if i == 5 else [] if i == 9 else [first, extra, None if i == 11 else 1.0])
    baseline = [None if i == 2 else 0.25 * (i % 4) for i in range(log.height)]
    return log.with_columns(
        pl.Series("steps", steps, dtype=pl.List(pl.Float64)),
        pl.Series("baseline", baseline, dtype=pl.Float64),
    )


COLUMNS = {"length": "length_col", "baseline": "baseline_col", "step_rewards": "step_rewards_col"}
NAMES = {"length": "length", "baseline": "baseline", "step_rewards": "steps"}


def columns_for(estimator: str, policy: dict[str, Any]) -> dict[str, str]:
    """The column options ``estimator`` needs (and ``length_col`` for token weights)."""
    needs = set(ESTIMATORS[estimator].needs) | (
        {"length"} if policy.get("token_weighted") else set()
    )
    return {COLUMNS[need]: NAMES[need] for need in needs}


def assert_same(a: pl.Series, b: pl.Series) -> None:
    """Equal nulls and at most 1e-12 apart (list columns: equal lists, step by step)."""
    assert a.dtype == b.dtype
    if a.dtype == pl.List(pl.Float64):
        assert a.list.len().to_list() == b.list.len().to_list()
        a, b = a.explode(), b.explode()
    assert a.len() == b.len()
    assert a.is_null().to_list() == b.is_null().to_list()
    assert a.is_nan().sum() == 0
    diff = (a - b).abs().max()
    assert diff is None or diff <= 1e-12, diff  # type: ignore[operator]


def on_both(run: Any, device: str = "cpu") -> int:
    """``run(**engine)`` on the Polars engine and on torch on ``device``: the same
    advantages, or the same refusal of the options (not of the engine). 1 when both
    computed."""
    try:
        expected = run(deterministic=True)
    except OptionsError as polars_error:
        with pytest.raises(OptionsError) as info:
            run(backend="torch", device=device)
        assert info.value.message == polars_error.message
        return 0
    assert_same(expected["advantage"], run(backend="torch", device=device)["advantage"])
    return 1


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_and_policy_matches_polars(estimator: str) -> None:
    """Every estimator x every policy: torch equals Polars to 1e-12 (nulls equal)."""
    log = parity_log()
    computed = []
    for policy in POLICIES:
        options = {**policy, **columns_for(estimator, policy)}

        def run(**engine: Any) -> pl.DataFrame:
            return compute_advantages(log, estimator=estimator, **options, **engine)  # noqa: B023

        computed.append(on_both(run))
    assert computed[0] == 1  # the defaults always compute
    if ESTIMATORS[estimator].unit == "response":  # only the options' own refusals
        assert sum(computed) == sum(not refused(estimator, p) for p in POLICIES), computed
    else:  # process: one reward column, no GDPO, no whiten, no center
        assert sum(computed) == len(POLICIES) - 8, computed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_every_estimator_policy_and_preset_matches_polars() -> None:
    """The same parity on a CUDA device (runs where a GPU is lent): every estimator x
    every policy, and every preset's own options, to 1e-12."""
    log = parity_log()
    computed = 0
    for estimator in ESTIMATORS:
        for policy in POLICIES:
            options = {**policy, **columns_for(estimator, policy)}

            def run(**engine: Any) -> pl.DataFrame:
                return compute_advantages(log, estimator=estimator, **options, **engine)  # noqa: B023

            computed += on_both(run, "cuda")
    for preset, known in PRESETS.items():
        own = dict(known.options)
        needs: dict[str, Any] = columns_for(str(own.get("estimator", "grpo")), own)

        def run_preset(**engine: Any) -> pl.DataFrame:
            return annotate(log, preset, **needs, **engine).frame  # noqa: B023

        computed += on_both(run_preset, "cuda")
    assert computed >= len(ESTIMATORS) * (len(POLICIES) - 8)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_matches_polars_with_every_estimator(preset: str) -> None:
    """Every preset x every estimator (its policies as the preset sets them)."""
    log = parity_log()
    computed = 0
    for estimator in ESTIMATORS:
        options: dict[str, Any] = columns_for(estimator, dict(PRESETS[preset].options))

        def run(**engine: Any) -> pl.DataFrame:
            return annotate(log, preset, estimator=estimator, **options, **engine).frame  # noqa: B023

        computed += on_both(run)
    assert computed >= 1


def test_equal_rewards_have_exactly_zero_variance_on_torch() -> None:
    """0.1 three times does not average to 0.1 in floating point: the group still has
    variance exactly 0 (the zero-spread rule), advantages exactly 0."""
    log = pl.DataFrame({"prompt_id": ["a"] * 3 + ["b"] * 2, "reward": [0.1, 0.1, 0.1, 0.0, 1.0]})
    got = annotate(log, backend="torch", device="cpu")
    assert got.frame["advantage"].to_list()[:3] == [0.0, 0.0, 0.0]
    assert got.run.zero_std_groups == 1


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
    """The one collision fallback (grpo_cli.core.plan.run_with_fallback) serves torch too."""
    import grpo_cli.core.plan as plan
    import grpo_cli.engines.torch as engine

    runs: list[bool] = []
    real_columns = engine.torch_columns

    def recording(frame: pl.DataFrame, plan: Any) -> pl.DataFrame:
        runs.append(plan.keys.hashed)
        return real_columns(frame, plan)

    monkeypatch.setattr(engine, "torch_columns", recording)
    monkeypatch.setattr(plan, "hash_collision", lambda frame, keys: keys.hashed)
    log = hostile_log(with_nulls=True)
    fallback = compute_advantages(log, backend="torch", device="cpu")["advantage"]
    assert runs == [True, False]  # hashed, then again on the exact key
    expected = compute_advantages(log, deterministic=True)["advantage"]
    assert (fallback - expected).abs().max() <= 1e-12  # type: ignore[operator]


def test_a_new_estimator_is_one_entry_and_runs_on_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimator registered anywhere (here: half the Dr. GRPO advantage, over the
    group's maximum) runs on torch with no change to the engine."""
    from grpo_cli.core.estimators import FormulaContext, Value, register_estimator

    monkeypatch.setattr("grpo_cli.core.estimators.ESTIMATORS", dict(ESTIMATORS))

    @register_estimator("half_gap", "0.5 (r - mean_g) / max_g", "a test")
    def half_gap(ctx: FormulaContext) -> Value:
        return 0.5 * (ctx.reward - ctx.group_mean()) / ctx.group_agg(ctx.reward, "max")

    log = pl.DataFrame({"prompt_id": ["a", "a", "b", "b"], "reward": [1.0, 3.0, 2.0, 4.0]})
    got = compute_advantages(log, estimator="half_gap", backend="torch", device="cpu")
    assert got["advantage"].to_list() == [-1 / 6, 1 / 6, -0.125, 0.125]


def test_group_codes_come_from_torch_unique_not_a_polars_sort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan's 64-bit key hash is coded on the device (no Polars rank): the codes
    match the dense rank's up to relabeling, and the count is the number of keys. A key
    that is not one integer column (the exact fallback of a string key) keeps Polars'."""
    import grpo_cli.engines.torch as engine

    hashes = pl.Series("h", [2**63 + 5, 7, 2**63 + 5, 2**64 - 1, 7, 0], dtype=pl.UInt64)
    frame = pl.DataFrame([hashes, pl.Series("s", ["b", "a", "b", "c", "a", "d"])])
    dense = engine.dense_codes(frame, ("h",)).to_list()

    def no_sort(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.Series:
        raise AssertionError(f"Polars coded {columns}")

    monkeypatch.setattr(engine, "dense_codes", no_sort)
    codes, count = engine.key_codes(torch, frame, ("h",), torch.device("cpu"))
    assert count == 4
    relabel = dict(zip(codes.tolist(), dense, strict=True))
    assert len(relabel) == 4 and [relabel[c] for c in codes.tolist()] == dense
    with pytest.raises(AssertionError, match="Polars coded"):
        engine.key_codes(torch, frame, ("s",), torch.device("cpu"))


def test_a_real_hash_collision_is_detected_on_the_device() -> None:
    """Two prompts forced onto one group hash (their second hashes differ): the device's
    check marks it (CHECK_MAX differs from the second hash on some row) and the plan's
    fallback then reruns on the exact key; without the forced clash nothing is marked."""
    import grpo_cli.engines.torch as engine
    from grpo_cli.core.columns import CHECK_MAX, GROUP_HASH
    from grpo_cli.core.engine_options import EngineOptions
    from grpo_cli.core.expressions import collect, prepare
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.core.plan import hash_collision
    from grpo_cli.core.resolve import make_request, resolve

    log = pl.DataFrame({"prompt_id": ["a", "a", "b", "b"], "reward": [1.0, 3.0, 2.0, 6.0]})
    plan = resolve(
        make_request(options=AdvantageOptions(), engine=EngineOptions(backend="torch")), log
    )
    prepared = collect(prepare(log, plan))
    clean = engine.torch_columns(prepared, plan)
    assert not hash_collision(prepared.hstack(clean), plan.keys)
    forced = prepared.with_columns(pl.lit(42, dtype=pl.UInt64).alias(GROUP_HASH))
    clashing = engine.torch_columns(forced, plan)
    assert clashing[CHECK_MAX].n_unique() == 1  # the one group's largest second hash
    assert hash_collision(forced.hstack(clashing), plan.keys)


@pytest.mark.slow
def test_the_torch_engine_imports_torch_while_the_log_is_read() -> None:
    """A torch run starts torch's import (a background thread) before the log is read;
    a Polars run and ``--help`` never import it."""
    code = (
        "import sys, threading; import grpo_cli.io.read as read; real = read.read_many\n"
        "def spy(*a, **k):\n"
        "    print('reading', [t.name for t in threading.enumerate() if 'torch' in t.name])\n"
        "    return real(*a, **k)\n"
        "read.read_many = spy\n"
        "from grpo_cli.jobs.run import run_job\n"
        f"run_job([{str(SAMPLE_FILES['parquet'])!r}], '-', output_format='jsonl',"
        " engine={'backend': sys.argv[1], 'device': 'cpu'})\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(backend: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", code, backend], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if not line.startswith("{")]

    assert run("torch") == ["reading ['grpo-import-torch']", "True"]
    assert run("polars") == ["reading []", "False"]


def test_the_device_running_out_of_memory_is_exit_5_not_a_bug(
    monkeypatch: pytest.MonkeyPatch, runner: CliRunner, tmp_path: Any
) -> None:
    """A real allocation that fails on the torch engine's device (here the CPU allocator,
    asked for 8 PiB by a formula registered in the test) ends with one line, a hint and
    exit 5, and writes nothing."""
    from grpo_cli.core.estimators import FormulaContext, Value, register_estimator

    monkeypatch.setattr("grpo_cli.core.estimators.ESTIMATORS", dict(ESTIMATORS))

    @register_estimator("too_big", "r x (a tensor of 2^50 zeros)", "a test")
    def too_big(ctx: FormulaContext) -> Value:
        return ctx.reward * ctx.torch.zeros(2**50, dtype=ctx.torch.float64).sum()  # type: ignore[attr-defined]

    out = tmp_path / "out.parquet"
    result = runner.invoke(
        app,
        [
            "compute",
            str(SAMPLE_FILES["parquet"]),
            "--estimator",
            "too_big",
            "--backend",
            "torch",
            "--device",
            "cpu",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 5, result.output
    assert result.stderr.splitlines()[0].startswith(
        "error: the torch engine's device (cpu) ran out of memory on "
    )
    assert "hint: compute with --low-memory" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert not out.exists()


def test_a_128_bit_integer_batch_is_coded_by_polars() -> None:
    """A key column of a type wider than int64 (Int128, only from the Python API) is coded
    by Polars, not cast into int64 (which raised Polars' conversion error)."""
    frame = pl.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b", "c", "c"],
            "reward": [1.0, 0.0, 5.0, 7.0, 2.0, 2.5],
            "batch": pl.Series([2**100, 2**100, 1, 1, 2**100, 2**100], dtype=pl.Int128),
        }
    )
    options: dict[str, Any] = {
        "group_cols": ("prompt_id",),
        "batch_col": "batch",
        "estimator": "reinforce_pp",
    }
    on_torch = compute_advantages(frame, **options, backend="torch", device="cpu")
    on_polars = compute_advantages(frame, **options)
    assert on_torch["advantage"].to_list() == pytest.approx(
        on_polars["advantage"].to_list(), abs=1e-12
    )


def test_out_of_memory_is_recognised_from_the_real_exceptions() -> None:
    """What :func:`is_out_of_memory` sees: NumPy's MemoryError, torch's CPU allocator, not
    any other RuntimeError."""
    import numpy as np

    from grpo_cli.core.errors import is_out_of_memory

    with pytest.raises(MemoryError) as numpy_error:
        np.empty(2**50, dtype=np.float64)
    with pytest.raises(RuntimeError) as torch_error:
        torch.empty(2**50, dtype=torch.float64)
    assert is_out_of_memory(numpy_error.value)
    assert is_out_of_memory(torch_error.value)
    assert not is_out_of_memory(RuntimeError("shape mismatch"))

"""The presets of NeMo-RL, AReaL, slime, SkyRL, ROLL, prime-rl and open-instruct, and of verl's
and OpenRLHF's other estimators, against the float32 re-implementations of each trainer's
code in :mod:`tests.trainer_reference`, on every engine (Polars, torch on the CPU,
``--low-memory``, ``group_advantages``; Ray in tests/test_ray_engine.py), to float32
rounding: at most 2e-6 relative past 1.

The logs are what the trainers see: several steps (one trainer batch each, ``batch_col``),
groups of one fixed size in consecutive rows (the trainers ``reshape(-1, n)``), a prompt id
sampled again in every step, token lengths. NeMo-RL's rewards are binary: its float32
``E[x^2] - E[x]^2`` leaves a residue on equal non-dyadic rewards, where grpo-adv gives 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.engines import partitioned
from grpo_cli.jobs.pipeline import annotate
from tests import trainer_reference as ref

TOL = 2e-6  # relative past 1: |got - expected| <= TOL * max(1, |expected|)
LOGS = [(11, 4), (12, 2), (13, 5), (14, 1)]  # (seed, group size n): n = 1, singletons
STEPS, GROUPS = 3, 4  # per log: steps, groups of n responses per step
REWARDS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "binary": lambda rng, size: rng.integers(0, 2, size).astype(float),
    "dyadic": lambda rng, size: rng.integers(0, 129, size) / 64,  # [0, 2] in steps of 1/64
    "wide": lambda rng, size: rng.integers(-24 * 64, 24 * 64 + 1, size) / 64,  # clips bite
}


def trainer_log(seed: int, n: int, rewards: str) -> pl.DataFrame:
    """STEPS steps of GROUPS groups of ``n`` consecutive rows; prompt ids repeat in every
    step (a group is a prompt within a step); one zero-variance group per step."""
    rng = np.random.default_rng(seed)
    size = STEPS * GROUPS * n
    reward = REWARDS[rewards](rng, size)
    reward[:n] = reward[0]  # a zero-variance group
    return pl.DataFrame(
        {
            "step": np.repeat(np.arange(1, STEPS + 1), GROUPS * n),
            "prompt_id": np.tile(np.repeat([f"p{g}" for g in range(GROUPS)], n), STEPS),
            "reward": reward,
            "format_reward": rng.integers(0, 2, size).astype(float),
            "length": rng.integers(1, 40, size),
        }
    )


@dataclass(frozen=True)
class Step:
    """One trainer batch, as the reference functions take it."""

    rewards: list[float]
    keys: list[str]
    lengths: list[int]
    formats: list[float]
    n: int


Reference = Callable[[Step], list[float]]
TWO_REWARDS = {"reward_cols": ("reward", "format_reward"), "reward_weights": (1.0, 0.5)}


def _nemo_gdpo(s: Step) -> list[float]:
    # NeMo-RL takes the weights in sorted name order: format_reward 1.0, reward 0.5.
    components = {"reward": s.rewards, "format_reward": s.formats}
    return ref.nemo_rl_gdpo(components, s.keys, weights=[1.0, 0.5])


def _verl_gdpo(s: Step) -> list[float]:
    components = {"reward": s.rewards, "format_reward": s.formats}
    return ref.verl_gdpo(components, s.keys, s.lengths, weights=[1.0, 0.5])


# preset: (rewards, the trainer's code on one step, options beyond the preset's), by trainer
CASES: dict[str, tuple[str, Reference, dict[str, Any]]] = {
    "nemo-rl": ("binary", lambda s: ref.nemo_rl_grpo(s.rewards, s.keys), {}),
    "nemo-rl-no-loo": (
        "binary",
        lambda s: ref.nemo_rl_grpo(s.rewards, s.keys, leave_one_out=False),
        {},
    ),
    "nemo-rl-no-std": (
        "binary",
        lambda s: ref.nemo_rl_grpo(s.rewards, s.keys, normalize_rewards=False),
        {},
    ),
    "nemo-rl-gdpo": ("binary", _nemo_gdpo, TWO_REWARDS),
    "nemo-rl-reinforce-pp": (
        "binary",
        lambda s: ref.nemo_rl_reinforce_pp(s.rewards, s.keys, s.lengths),
        {},
    ),
    "areal": ("wide", lambda s: ref.areal(s.rewards, s.n, s.lengths), {}),
    "areal-no-adv-norm": (
        "wide",
        lambda s: ref.areal(s.rewards, s.n, s.lengths, adv_norm=False),
        {},
    ),
    "areal-dr-grpo": ("wide", lambda s: ref.areal(s.rewards, s.n, s.lengths, "dr_grpo"), {}),
    "areal-rloo": ("wide", lambda s: ref.areal(s.rewards, s.n, s.lengths, "rloo"), {}),
    "areal-reinforce": ("wide", lambda s: ref.areal(s.rewards, s.n, s.lengths, "reinforce"), {}),
    "slime": ("dyadic", lambda s: ref.slime_grpo(s.rewards, s.n), {}),
    "slime-no-std": (
        "dyadic",
        lambda s: ref.slime_grpo(s.rewards, s.n, std_normalization=False),
        {},
    ),
    "skyrl": ("dyadic", lambda s: ref.skyrl_grpo(s.rewards, s.keys), {}),
    "skyrl-no-std": ("dyadic", lambda s: ref.skyrl_grpo(s.rewards, s.keys, norm_by_std=False), {}),
    "skyrl-rloo": ("dyadic", lambda s: ref.skyrl_rloo(s.rewards, s.keys), {}),
    "skyrl-maxrl": ("dyadic", lambda s: ref.skyrl_maxrl(s.rewards, s.keys), {}),
    "skyrl-reinforce-pp": ("dyadic", lambda s: ref.skyrl_reinforce_pp(s.rewards, s.lengths), {}),
    "roll": ("dyadic", lambda s: ref.roll_grpo(s.rewards, s.n), {}),
    "roll-whiten": (
        "dyadic",
        lambda s: ref.roll_grpo(s.rewards, s.n, s.lengths, whiten_advantages=True),
        {},
    ),
    "prime-rl": ("dyadic", lambda s: ref.prime_rl_grpo(s.rewards, s.keys), {}),
    "prime-rl-max-rl": ("dyadic", lambda s: ref.prime_rl_max_rl(s.rewards, s.keys), {}),
    "open-instruct": ("dyadic", lambda s: ref.open_instruct(s.rewards, s.n), {}),
    "open-instruct-standard": (
        "dyadic",
        lambda s: ref.open_instruct(s.rewards, s.n, "standard"),
        {},
    ),
    "verl": ("dyadic", lambda s: ref.verl_grpo_vectorized(s.rewards, s.keys), {}),
    "verl-rloo-vectorized": ("dyadic", lambda s: ref.verl_rloo_vectorized(s.rewards, s.keys), {}),
    "verl-gdpo": ("dyadic", _verl_gdpo, TWO_REWARDS),
    "openrlhf-reinforce": (
        "wide",
        lambda s: ref.openrlhf_0_11_2(s.rewards, s.n, "reinforce", s.lengths),
        {},
    ),
    "openrlhf-reinforce-no-std": (
        "wide",
        lambda s: ref.openrlhf_0_11_2(s.rewards, s.n, "reinforce", s.lengths, no_std_norm=True),
        {},
    ),
    "openrlhf-reinforce-baseline-no-std": (
        "wide",
        lambda s: ref.openrlhf_0_11_2(
            s.rewards, s.n, "reinforce_baseline", s.lengths, no_std_norm=True
        ),
        {},
    ),
    "openrlhf-flash-reinforce": (
        "wide",
        lambda s: ref.openrlhf_0_11_2(s.rewards, s.n, "flash_reinforce"),
        {},
    ),
}


def expected(log: pl.DataFrame, reference: Reference, n: int) -> list[float]:
    """The trainer's advantages, one call per step (one trainer batch each)."""
    out: list[float] = []
    for step in log.partition_by("step", maintain_order=True):
        s = Step(
            step["reward"].to_list(),
            step["prompt_id"].to_list(),
            step["length"].to_list(),
            step["format_reward"].to_list(),
            n,
        )
        out += reference(s)
    return out


def on_engine(engine: str, log: pl.DataFrame, preset: str, extra: dict[str, Any], tmp: Path) -> Any:
    """``preset``'s advantages of ``log`` on ``engine``, one batch per step."""
    options = {"batch_col": "step", "length_col": "length", **extra}
    if engine == "polars":
        return annotate(log, preset, **options).frame["advantage"].to_list()
    if engine == "torch":
        pytest.importorskip("torch")
        frame = annotate(log, preset, backend="torch", device="cpu", **options).frame
        return frame["advantage"].to_list()
    if engine == "low-memory":
        source, out = tmp / "log.parquet", tmp / "out.parquet"
        log.write_parquet(source)
        request = make_request(preset, options, EngineOptions(backend="partitioned"))
        plan = resolve(request, pl.scan_parquet(source).collect_schema())
        partitioned.run(source, out, plan, partitions=3, chunk_rows=7)
        return pl.read_parquet(out)["advantage"].to_list()
    torch = pytest.importorskip("torch")
    from grpo_cli import group_advantages

    columns = options.pop("reward_cols", ("reward",))
    if preset == "nemo-rl-gdpo":
        columns = tuple(sorted(columns))  # a tensor's columns have no names: given sorted
    rewards = torch.tensor(log.select(columns).to_numpy(), dtype=torch.float64)
    groups = log.select(pl.struct("step", "prompt_id").rank("dense"))
    got = group_advantages(
        rewards if len(columns) > 1 else rewards[:, 0],
        torch.tensor(groups.to_series().to_numpy().astype(np.int64)),
        batch=torch.tensor(log["step"].to_numpy()),
        lengths=torch.tensor(log["length"].to_numpy()),
        weights=options.pop("reward_weights", None),
        preset=preset,
    )
    return got.tolist()


def worst(got: list[float | None], want: list[float]) -> float:
    """The largest ``|got - want| / max(1, |want|)``; where the trainer gives NaN (ROLL's
    one-response group) grpo-adv must give null."""
    assert len(got) == len(want)
    diffs = [0.0]
    for g, w in zip(got, want, strict=True):
        if np.isnan(w):
            assert g is None or np.isnan(g)
        else:
            assert g is not None and not np.isnan(g)
            diffs.append(abs(g - w) / max(1.0, abs(w)))
    return max(diffs)


ENGINES = ["polars", "torch", "low-memory", "tensors"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("preset", CASES)
def test_preset_reproduces_its_trainer(preset: str, engine: str, tmp_path: Path) -> None:
    rewards, reference, extra = CASES[preset]
    for seed, n in LOGS:
        log = trainer_log(seed, n, rewards)
        want = expected(log, reference, n)
        got = on_engine(engine, log, preset, dict(extra), tmp_path)
        assert worst(got, want) <= TOL, (seed, n)


# The trainers that key groups by a prompt id (not a reshape): groups of any size.
KEYED = [
    *(p for p in CASES if p.startswith(("nemo-rl", "skyrl", "prime-rl"))),
    "verl",
    "verl-rloo-vectorized",
    "verl-gdpo",
]


@pytest.mark.parametrize("engine", ["polars", "tensors"])
@pytest.mark.parametrize("preset", KEYED)
def test_keyed_trainers_on_groups_of_every_size(preset: str, engine: str, tmp_path: Path) -> None:
    """Groups of 1 to 6 responses in each step (a singleton among them)."""
    rewards, reference, extra = CASES[preset]
    sizes = [1, 3, 4, 2, 6]
    rng = np.random.default_rng(5)
    log = trainer_log(5, 1, rewards).head(0)
    for step in (1, 2):
        size = sum(sizes)
        log = log.vstack(
            pl.DataFrame(
                {
                    "step": np.full(size, step),
                    "prompt_id": np.repeat([f"p{g}" for g in range(len(sizes))], sizes),
                    "reward": REWARDS[rewards](rng, size),
                    "format_reward": rng.integers(0, 2, size).astype(float),
                    "length": rng.integers(1, 40, size),
                }
            ).cast(log.schema)
        )
    want = expected(log, reference, 0)
    assert worst(on_engine(engine, log, preset, dict(extra), tmp_path), want) <= TOL


HAND = pl.DataFrame(
    {
        "step": [1] * 8,
        "prompt_id": ["a"] * 4 + ["b"] * 4,
        "reward": [1.0, 0, 0, 1, 0, 0, 1, 1],
        "format_reward": [1.0] * 8,
        "length": [1] * 8,
    }
)
SIGNS = [1, -1, -1, 1, -1, -1, 1, 1]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("preset", "value"),
    [
        ("nemo-rl", 1.154699),  # (2/3) / (std of the other three + 1e-6)
        ("skyrl-maxrl", 0.999998),  # 0.5 / (0.5 + 1e-6)
        ("areal", 0.935404),  # 0.5 / (sqrt(1/3) + 1e-5), then whitened over 8 tokens
        ("open-instruct-standard", 1.0),  # 0.5 / (0.5 + 1e-8), population std
    ],
)
def test_hand_computed(preset: str, value: float, engine: str, tmp_path: Path) -> None:
    """Groups [1, 0, 0, 1] and [0, 0, 1, 1], each response one token long."""
    got = on_engine(engine, HAND, preset, {}, tmp_path)
    assert got == pytest.approx([s * value for s in SIGNS], abs=1e-6)

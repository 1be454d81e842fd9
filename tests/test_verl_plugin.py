"""grpo_cli.verl: grpo-adv's estimators and presets in verl's advantage-estimator registry,
run through verl's own dispatch (``ray_trainer.compute_advantage``) on token-level batches.

Needs the verl extra (verl 0.9.1 and what its trainer imports), installed with this
checkout (the ``verl.plugins`` entry point); skipped without verl.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import polars as pl
import pytest

from grpo_cli import compute_advantages
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.presets import PRESETS, merge_options
from tests.conftest import import_or_skip

torch = import_or_skip("torch")
import_or_skip("verl")

from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from grpo_cli.verl import register  # noqa: E402

# What verl's trainer cannot hand a registered estimator: step-reward lists, per-dimension
# rewards, greedy baselines (made for verl's own remax alone).
LEFT_OUT = {"process", "remax", "trl-gdpo", "verl-gdpo", "nemo-rl-gdpo"}
REGISTERED = [name for name in [*ESTIMATORS, *PRESETS] if name not in LEFT_OUT]
SIZES = (3, 5, 3, 4, 6)  # responses per prompt


def batch(sizes: tuple[int, ...] = SIZES, seed: int = 0, width: int = 7) -> DataProto:
    """A verl batch as its reward manager leaves it: the outcome reward on the last token
    of each response (lengths 1..width), padding after; prompt ids as strings (``uid``);
    a ReMax baseline per response."""
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    lengths = torch.randint(1, width + 1, (n,), generator=gen)
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).float()
    rewards = torch.randn(n, generator=gen).round(decimals=1)
    token_rewards = torch.zeros(n, width)
    token_rewards[torch.arange(n), lengths - 1] = rewards
    uid = np.array([f"prompt-{g}" for g, size in enumerate(sizes) for _ in range(size)])
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": token_rewards,
            "response_mask": mask,
            "reward_baselines": torch.randn(n, generator=gen).round(decimals=1),
        },
        non_tensors={"uid": uid},
    )


def frame_path(data: DataProto, name: str) -> Any:
    """grpo_cli.compute_advantages on the per-response table, spread over the tokens."""
    mask = data.batch["response_mask"]
    table = pl.DataFrame(
        {
            "prompt_id": data.non_tensor_batch["uid"].tolist(),
            "reward": data.batch["token_level_rewards"].sum(-1).double().numpy(),
            "length": mask.sum(-1).long().numpy(),
            "baseline": data.batch["reward_baselines"].double().numpy(),
        }
    )
    explicit = {"estimator": name} if name in ESTIMATORS else {}
    options = merge_options(None if name in ESTIMATORS else name, explicit)
    annotated = compute_advantages(
        table, group_cols=("prompt_id",), length_col="length", baseline_col="baseline", **options
    )
    advantage = torch.from_numpy(annotated["advantage"].to_numpy())
    return advantage.unsqueeze(-1) * mask.double()


def verl_name(name: str) -> str:
    return "grpo_adv_" + name.replace("-", "_")


def test_every_estimator_and_preset_is_registered_under_its_own_prefix() -> None:
    """Every grpo-adv name verl can feed, prefixed so that none is one of verl's own."""
    ours = {name for name in ADV_ESTIMATOR_REGISTRY if name.startswith("grpo_adv_")}
    assert ours == {verl_name(name) for name in REGISTERED}
    assert len(ours) == 54
    assert {"grpo", "rloo", "gdpo", "remax", "opo"} <= set(ADV_ESTIMATOR_REGISTRY)


@pytest.mark.slow
def test_import_verl_alone_registers_them() -> None:
    """verl loads the ``verl.plugins`` entry points on ``import verl``, in each of its
    processes (the Ray TaskRunner included): no import of grpo_cli.verl needed."""
    code = (
        "import verl.trainer.ppo.core_algos as c\n"
        "print(len([n for n in c.ADV_ESTIMATOR_REGISTRY if n.startswith('grpo_adv_')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split()[-1] == "54", "reinstall: pip install -e '.[verl]'"


@pytest.mark.parametrize("name", REGISTERED)
def test_verl_dispatch_equals_the_frame_path(name: str) -> None:
    """``algorithm.adv_estimator=grpo_adv_<name>`` through verl's ``compute_advantage``:
    the frame path's advantage on every response token, 0 on padding, to 1e-6 (relative
    for maxrl's large values: verl's float32); the returns are the advantages, as verl's
    outcome estimators give them."""
    data = batch()
    expected = frame_path(data, name)
    out = compute_advantage(batch(), verl_name(name), config=AlgoConfig())
    advantages, returns = out.batch["advantages"], out.batch["returns"]
    assert advantages.shape == (sum(SIZES), 7)
    assert advantages.dtype == torch.float32
    torch.testing.assert_close(advantages.double(), expected, atol=1e-6, rtol=1e-6)
    assert torch.equal(returns, advantages)
    assert advantages.abs().sum() > 1  # not all zero


# grpo-adv's verl presets against verl's own estimators (norm_adv_by_std_in_grpo), on a
# batch with a one-response group but for pass@k, which verl refuses there.
VERL_OWN = [
    ("verl", "grpo", True),
    ("verl-dr-grpo", "grpo", False),
    ("verl-rloo", "rloo", True),
    ("verl-rloo-vectorized", "rloo_vectorized", True),
    ("verl-reinforce-pp-baseline", "reinforce_plus_plus_baseline", True),
    ("verl-gpg", "gpg", True),
    ("verl-grpo-passk", "grpo_passk", True),
]


@pytest.mark.parametrize(("preset", "own", "norm"), VERL_OWN)
def test_verl_presets_equal_verl_own_estimators(preset: str, own: str, norm: bool) -> None:
    sizes = (*SIZES, 1) if own != "grpo_passk" else SIZES
    theirs = compute_advantage(
        batch(sizes, seed=3),
        own,
        norm_adv_by_std_in_grpo=norm,
        config=AlgoConfig(norm_adv_by_std_in_grpo=norm),
    ).batch["advantages"]
    ours = compute_advantage(batch(sizes, seed=3), verl_name(preset), config=AlgoConfig())
    torch.testing.assert_close(ours.batch["advantages"], theirs, atol=1e-6, rtol=0)
    assert theirs.abs().sum() > 1


def test_norm_adv_by_std_false_is_refused_not_ignored() -> None:
    config = AlgoConfig(norm_adv_by_std_in_grpo=False)
    with pytest.raises(OptionsError) as info:
        compute_advantage(batch(), "grpo_adv_verl", config=config)
    assert str(info.value) == "grpo_adv_verl does not read norm_adv_by_std_in_grpo=False"
    assert "grpo_adv_verl_dr_grpo" in str(info.value.hint)


def test_a_nan_advantage_is_refused() -> None:
    """ROLL's preset gives a one-response group a null advantage: in verl, a NaN gradient."""
    with pytest.raises(InputError) as info:
        compute_advantage(batch((*SIZES, 1)), "grpo_adv_roll", config=AlgoConfig())
    assert str(info.value) == (
        "grpo_adv_roll gave 1 NaN advantage(s) of 22, which would train as a NaN gradient"
    )


def test_register_a_custom_estimator() -> None:
    """``register(name, preset, **options)``: the options win over the preset."""
    fn = register("test-rloo-clipped", preset="verl-rloo", clip=(-0.5, 0.5))
    assert ADV_ESTIMATOR_REGISTRY["grpo_adv_test_rloo_clipped"] is fn
    out = compute_advantage(batch(), "grpo_adv_test_rloo_clipped", config=AlgoConfig())
    unclipped = frame_path(batch(), "verl-rloo")
    torch.testing.assert_close(out.batch["advantages"].double(), unclipped.clamp(-0.5, 0.5))
    assert unclipped.abs().max() > 0.5
    with pytest.raises(ValueError, match="has already been registered"):
        register("test-rloo-clipped", preset="verl-rloo")


def test_register_remax_reads_the_batch_reward_baselines() -> None:
    register("test-remax", estimator="remax")
    out = compute_advantage(batch(), "grpo_adv_test_remax", config=AlgoConfig())
    expected = frame_path(batch(), "remax")
    torch.testing.assert_close(out.batch["advantages"].double(), expected, atol=1e-6, rtol=0)
    assert expected.abs().sum() > 1


def test_epsilon_given_is_the_eps() -> None:
    """verl's signature: an ``epsilon`` passed (verl's GRPO branch passes none) is ``eps``."""
    data = batch((3, 2))
    estimate = ADV_ESTIMATOR_REGISTRY["grpo_adv_verl"]
    advantages, _ = estimate(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        epsilon=0.5,
    )
    scores = data.batch["token_level_rewards"].sum(-1).double()
    expected = torch.cat(
        [(s - s.mean()) / (s.std() + 0.5) for s in (scores[:3], scores[3:])]
    ).float()
    torch.testing.assert_close(advantages[:, 0], expected)

"""Make small logs in the trainers' own dump layouts, with the advantages the trainers
would log, computed the trainers' way: fixed-size groups, float32, numpy written like the
trainers' torch code (rewards.view(-1, G), nanmean / nanstd, + eps).

- ``trl_completions/completions_0000{1,2}.parquet``: TRL >= 0.28 ``log_completions`` files
  (``step``, ``prompt``, ``completion``, one column per reward function, ``advantage``);
  GRPOConfig(num_generations=4, reward_weights=[1.0, 0.5], scale_rewards="group").
- ``verl_dump/{1,2,3}.jsonl``: verl v1-trainer rollout dumps (``input``, ``output``, ``gts``,
  ``score``, ``step``, ``uid`` = ``{uuid}_{session}_{index}``), rollout.n = 4, grpo; verl
  does not dump advantages, so ``advantage`` is the one a user logged beside them.
- ``openrlhf_log.jsonl``: OpenRLHF writes no per-sample dump; this is the log a user writes
  from a reward function (``prompt``, ``response``, ``label``, ``reward``) plus the
  ``group_norm`` advantage, n_samples_per_prompt = 8.

Run from the repository root: ``python sample_data/make_trainer_dumps.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
F32 = np.float32


def trl_nanstd(grouped: np.ndarray) -> np.ndarray:
    """trl.trainer.utils.nanstd along dim 1, in float32."""
    mean = np.nanmean(grouped, axis=1, keepdims=True)
    variance = np.nanmean((grouped - mean) ** 2, axis=1, keepdims=True)
    count = np.sum(~np.isnan(grouped), axis=1, keepdims=True).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        correction = np.where(count > 1, count / (count - 1), np.nan).astype(F32)
    std: np.ndarray = np.sqrt(variance * correction).astype(F32)
    return std


def trl_advantages(rewards_per_func: np.ndarray, weights: np.ndarray, g: int) -> np.ndarray:
    """TRL GRPOTrainer, multi_objective_aggregation='sum_then_normalize', scale 'group'."""
    unscorable = np.isnan(rewards_per_func).all(axis=1)
    rewards = np.nansum(rewards_per_func * weights[None, :], axis=1).astype(F32)
    rewards[unscorable] = np.nan
    grouped = rewards.reshape(-1, g)
    mean = np.nanmean(grouped, axis=1, keepdims=True).astype(F32)
    std = trl_nanstd(grouped)
    advantages = ((grouped - mean) / (std + F32(1e-4))).reshape(-1)
    result: np.ndarray = np.nan_to_num(advantages, nan=0.0).astype(F32)
    return result


def make_trl(rng: np.random.Generator) -> None:
    folder = HERE / "trl_completions"
    folder.mkdir(exist_ok=True)
    g, prompts = 4, 8
    weights = np.array([1.0, 0.5], dtype=F32)
    for step in (1, 2):
        n = g * prompts
        accuracy = rng.integers(0, 2, size=n).astype(F32)
        accuracy[:g] = 1.0  # a zero-variance group
        fmt = (rng.integers(0, 5, size=n) / 4).astype(F32)
        fmt[5] = np.nan  # the format reward returned None for one completion
        matrix = np.stack([accuracy, fmt], axis=1)
        frame = pl.DataFrame(
            {
                "step": [step * 10] * n,
                "prompt": [
                    f"Question {step}-{i // g}: what is {i // g} + {step}?" for i in range(n)
                ],
                "completion": [f"The answer is {rng.integers(0, 12)}." for _ in range(n)],
                "accuracy_reward": accuracy.astype(np.float64),
                "format_reward": fmt.astype(np.float64),
                "advantage": trl_advantages(matrix, weights, g).astype(np.float64),
            }
        ).with_columns(pl.col("format_reward").fill_nan(None))
        frame.write_parquet(folder / f"completions_{step * 10:05d}.parquet")


def verl_grpo(scores: np.ndarray, uids: list[str], eps: float = 1e-6) -> np.ndarray:
    """verl compute_grpo_outcome_advantage in float32 (torch.mean, torch.std unbiased)."""
    out = np.zeros_like(scores)
    for uid in dict.fromkeys(uids):
        idx = [i for i, u in enumerate(uids) if u == uid]
        values = scores[idx]
        if len(values) == 1:
            mean, std = F32(0.0), F32(1.0)
        else:
            mean, std = values.mean(dtype=F32), values.std(ddof=1, dtype=F32)
        out[idx] = (values - mean) / (std + F32(eps))
    return out


def make_verl(rng: np.random.Generator) -> None:
    folder = HERE / "verl_dump"
    folder.mkdir(exist_ok=True)
    n, prompts = 4, 6
    for step in (1, 2, 3):
        rows = []
        for p in range(prompts):
            uuid = "".join(f"{b:02x}" for b in rng.integers(0, 256, size=16))
            uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
            skill = rng.uniform(0.2, 0.8)
            for k in range(n):
                score = float(rng.random() < skill) if p % 2 else round(float(rng.random()), 3)
                rows.append(
                    {
                        "input": f"system\nYou are helpful.\nuser\nSolve problem {step}.{p}\n"
                        "assistant\n",
                        "output": f"Step 1: think. Answer: {rng.integers(0, 9)}",
                        "gts": str(p),
                        "score": score,
                        "step": step,
                        "uid": f"{uuid}_0_{k}",
                    }
                )
        scores = np.array([r["score"] for r in rows], dtype=F32)
        advantages = verl_grpo(scores, [str(r["uid"]).rsplit("_", 2)[0] for r in rows])
        with (folder / f"{step}.jsonl").open("w") as handle:
            for row, advantage in zip(rows, advantages, strict=True):
                row["advantage"] = float(advantage)
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def openrlhf_group_norm(rewards: np.ndarray, n: int) -> np.ndarray:
    """OpenRLHF group_norm in float32: (r - mean) / (std + 1e-9) over view(-1, n), then the
    compute_reward clamp to [-10, 10]."""
    grouped = rewards.reshape(-1, n)
    mean = grouped.mean(axis=1, keepdims=True, dtype=F32)
    std = grouped.std(axis=1, ddof=1, keepdims=True, dtype=F32)
    shaped = ((grouped - mean) / (std + F32(1e-9))).reshape(-1)
    clipped: np.ndarray = np.clip(shaped, -10, 10).astype(F32)
    return clipped


def make_openrlhf(rng: np.random.Generator) -> None:
    """OpenRLHF writes no per-sample dump: users log from their reward function. This is
    such a log (prompt, response, label, reward) plus the advantage, n_samples_per_prompt=8."""
    n, prompts = 8, 5
    rewards = rng.integers(0, 5, size=n * prompts).astype(F32) / 4
    advantages = openrlhf_group_norm(rewards, n)
    with (HERE / "openrlhf_log.jsonl").open("w") as handle:
        for i, (reward, advantage) in enumerate(zip(rewards, advantages, strict=True)):
            row = {
                "prompt": f"Prove lemma {i // n}.",
                "response": f"Proof attempt {i % n}.",
                "label": "qed",
                "reward": float(reward),
                "advantage": float(advantage),
            }
            handle.write(json.dumps(row) + "\n")


def main() -> None:
    rng = np.random.default_rng(20260101)
    make_trl(rng)
    make_verl(rng)
    make_openrlhf(rng)
    print(f"wrote the TRL, verl and OpenRLHF logs in {HERE}")


if __name__ == "__main__":
    main()

"""Make the shipped sample reward log: the same data as Parquet, CSV and JSONL.

64 prompts over 4 training steps (16 a step), group sizes 1 to 16, rows shuffled within
each step as a trainer's logger writes them. Math prompts get binary rewards (correct or
not), chat prompts continuous ones in [0, 1]. Guaranteed: one zero-variance group
(p003, all correct), one singleton group (p017), one null reward (p040, completion 2).

Run from the repository root: ``python sample_data/make_sample_data.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

SEED = 20250205
STEPS = 4
PROMPTS_PER_STEP = 16
HERE = Path(__file__).resolve().parent


def make_sample_log(seed: int = SEED) -> pl.DataFrame:
    """The sample log as a DataFrame (deterministic for a given seed)."""
    rng = np.random.default_rng(seed)
    n_prompts = STEPS * PROMPTS_PER_STEP
    sizes = rng.integers(2, 17, size=n_prompts)
    sizes[0], sizes[3], sizes[17], sizes[40] = 16, 8, 1, 6
    rows: list[dict[str, object]] = []
    for prompt in range(n_prompts):
        step = prompt // PROMPTS_PER_STEP + 1
        task = "math" if prompt % 2 == 1 or prompt == 40 else "chat"
        if prompt == 3:
            task = "math"
        skill = rng.uniform(0.1, 0.9)
        for completion in range(int(sizes[prompt])):
            length = int(rng.integers(20, 400))
            reward: float | None
            if task == "math":
                reward = float(rng.random() < skill)
            else:
                reward = round(float(np.clip(rng.normal(skill, 0.2), 0.0, 1.0)), 4)
            if prompt == 3:
                reward = 1.0
            if prompt == 40 and completion == 2:
                reward = None
            rows.append(
                {
                    "step": step,
                    "prompt_id": f"p{prompt:03d}",
                    "completion_id": completion,
                    "task": task,
                    "completion": f"answer {completion} to prompt {prompt}",
                    "length": length,
                    "reward": reward,
                }
            )
    frame = pl.DataFrame(
        rows,
        schema={
            "step": pl.Int64,
            "prompt_id": pl.String,
            "completion_id": pl.Int64,
            "task": pl.String,
            "completion": pl.String,
            "length": pl.Int64,
            "reward": pl.Float64,
        },
    )
    order = np.concatenate(
        [
            rng.permutation(np.flatnonzero(frame["step"].to_numpy() == step))
            for step in range(1, STEPS + 1)
        ]
    )
    return frame[order]


def main() -> None:
    frame = make_sample_log()
    frame.write_parquet(HERE / "rewards.parquet")
    frame.write_csv(HERE / "rewards.csv")
    frame.write_ndjson(HERE / "rewards.jsonl")
    print(f"wrote {frame.height} rows, {frame['prompt_id'].n_unique()} prompts to {HERE}")


if __name__ == "__main__":
    main()

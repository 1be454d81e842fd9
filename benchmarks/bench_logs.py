"""Seeded synthetic reward logs for the benchmarks.

Like a GRPO training run: ``prompt_id`` strings ("p000123-s0042"), a ``step``, rewards
binary for 60% of groups and continuous for the rest; group sizes 8 (45%), 16 (35%), else
uniform in 1..64 (about 15.7 rows a group). Rows are shuffled globally (``order="shuffled"``),
within each step (``"step"``) or left grouped (``"grouped"``). ``text=True`` adds a
``prompt`` (~200 characters) and a ``completion`` (~1000, with commas, quotes, newlines).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

STEPS = 16


def group_sizes(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Group sizes adding up to ``rows``: 8 (45%), 16 (35%), else uniform in 1..64."""
    n_groups = rows // 15 + 64
    kind = rng.random(n_groups)
    sizes = np.where(kind < 0.45, 8, np.where(kind < 0.80, 16, rng.integers(1, 65, n_groups)))
    cut = int(np.searchsorted(np.cumsum(sizes), rows)) + 1
    sizes = sizes[:cut]
    sizes[-1] -= int(sizes.sum()) - rows
    result: np.ndarray = sizes[sizes > 0]
    return result


def make_log(
    rows: int, *, seed: int = 42, order: str = "shuffled", text: bool = False
) -> pl.DataFrame:
    """A synthetic reward log of about ``rows`` rows (exactly ``rows``)."""
    rng = np.random.default_rng(seed)
    sizes = group_sizes(rng, rows)
    group = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    step = group * STEPS // len(sizes)
    binary = rng.random(len(sizes)) < 0.6
    skill = rng.random(len(sizes))
    noise = rng.random(rows)
    reward = np.where(binary[group], (noise < skill[group]).astype(np.float64), noise.round(4))
    frame = pl.DataFrame(
        {
            "step": step,
            "prompt_id": pl.Series(group).cast(pl.String),
            "reward": reward,
        }
    ).with_columns(
        prompt_id=pl.format(
            "p{}-s{}", pl.col("prompt_id").str.zfill(6), pl.col("step").cast(pl.String).str.zfill(4)
        )
    )
    if text:
        words = np.array(["the", "answer", "is", "42,", '"so"', "therefore\n", "we", "get", "x=3;"])
        prompt = [" ".join(words[rng.integers(0, len(words), 40)]) for _ in range(min(rows, 4096))]
        completion = [" ".join(words[rng.integers(0, len(words), 200)]) for _ in range(4096)]
        frame = frame.with_columns(
            prompt=pl.Series(prompt)[np.arange(rows) % len(prompt)],
            completion=pl.Series(completion)[rng.integers(0, len(completion), rows)],
        )
    if order == "shuffled":
        frame = frame[rng.permutation(rows)]
    elif order == "step":
        perm = np.lexsort((rng.random(rows), frame["step"].to_numpy()))
        frame = frame[perm]
    elif order != "grouped":
        raise ValueError(f"unknown order {order!r}")
    return frame


def write_log(path: Path, rows: int, **kwargs: object) -> Path:
    """Write :func:`make_log` to ``path`` (Parquet, zstd) unless it already exists."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        make_log(rows, **kwargs).write_parquet(tmp)  # type: ignore[arg-type]
        tmp.rename(path)
    return path


def write_big_log(path: Path, rows: int, *, seed: int = 42, chunk: int = 10_000_000) -> Path:
    """A shuffled numeric log too large to build in memory, written in chunks: the group
    of every row is a global permutation of the group sizes, so groups span the file."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    sizes = group_sizes(rng, rows)
    group = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    rng.shuffle(group)
    binary = rng.random(len(sizes)) < 0.6
    skill = rng.random(len(sizes))

    def chunks() -> Iterator[pl.DataFrame]:
        for lo in range(0, rows, chunk):
            g = group[lo : lo + chunk]
            reward = _rewards(rng, binary[g], skill[g])
            step = g.astype(np.int64) * STEPS // len(sizes)
            frame = pl.DataFrame({"step": step, "prompt_id": g, "reward": reward})
            yield frame.with_columns(
                prompt_id=pl.format(
                    "p{}-s{}",
                    pl.col("prompt_id").cast(pl.String).str.zfill(7),
                    pl.col("step").cast(pl.String).str.zfill(4),
                )
            )

    return _write_chunks(path, chunks())


def write_step_log(
    path: Path, rows: int, *, prompts_per_step: int = 256, seed: int = 42, chunk_steps: int = 4096
) -> Path:
    """A log written step by step, as trainers write them, too large to build in memory:
    ``prompts_per_step`` groups a step (sizes as :func:`group_sizes`), the rows of each step
    shuffled among themselves, steps in order; written in chunks of ``chunk_steps`` steps."""
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    sizes = group_sizes(rng, rows)
    per_chunk = prompts_per_step * chunk_steps

    def chunks() -> Iterator[pl.DataFrame]:
        for first in range(0, len(sizes), per_chunk):
            chunk = sizes[first : first + per_chunk]
            group = np.repeat(np.arange(first, first + len(chunk), dtype=np.int64), chunk)
            step = group // prompts_per_step
            order = np.argsort(step + rng.random(len(group)), kind="stable")  # within steps
            group, step = group[order], step[order]
            local = group - first
            binary = rng.random(len(chunk)) < 0.6
            skill = rng.random(len(chunk))
            reward = _rewards(rng, binary[local], skill[local])
            frame = pl.DataFrame({"step": step, "prompt_id": group, "reward": reward})
            yield frame.with_columns(
                prompt_id=pl.format("p{}", pl.col("prompt_id").cast(pl.String).str.zfill(9))
            )

    return _write_chunks(path, chunks())


def _rewards(rng: np.random.Generator, binary: np.ndarray, skill: np.ndarray) -> np.ndarray:
    """Per row: 0/1 with its group's success rate ``skill`` where its group is ``binary``,
    else a uniform reward rounded to 4 digits."""
    noise = rng.random(len(binary))
    result: np.ndarray = np.where(binary, (noise < skill).astype(np.float64), noise.round(4))
    return result


def _write_chunks(path: Path, frames: Iterator[pl.DataFrame]) -> Path:
    """``frames`` to one Parquet file (zstd, row groups of 1M rows) at ``path``, through a
    ``.part`` file renamed at the end."""
    import pyarrow.parquet as pq

    tmp = path.with_suffix(".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    for frame in frames:
        table = frame.to_arrow()
        if writer is None:
            writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1_000_000)
    if writer is not None:
        writer.close()
    tmp.rename(path)
    return path

"""Time ``group_advantages`` against plain torch implementations of the same formulas.

    python benchmarks/tensors.py                        # 1M and 10M rows, the CPU
    python benchmarks/tensors.py --rows 1000000 --rounds 5 --device cuda

For each size, on seeded float64 rewards in [0, 1):

- fixed groups, G consecutive rows (``--group-size``): ``group_advantages(r, group_size=G,
  estimator=E, nulls="exclude")`` (``nulls=`` given, as a trainer's call gives it or its
  preset does: no NaN count) (and, for grpo, ``groups=arange(N // G).repeat_interleave(G)``) against
  the formula written on the ``(N / G, G)`` view as a trainer writes it (grpo: TRL's
  ``view(-1, G)``, ``mean``, ``std``, ``repeat_interleave``, ``(r - mean) / (std + eps)``);
- variable groups, sizes 2..2G in shuffled rows: ``group_advantages(r, groups)`` against
  the same z-score written with ``index_add_`` over the dense codes (which the plain
  version is given: grpo-adv takes any integer ids);
- float32: the plain grpo formula in float32 over float64, what computing in float32
  inside would gain (grpo-adv computes in float64 and casts the result).

Each time is the best of ``--rounds`` interleaved runs after a warm-up (the least disturbed
on a shared machine); the ratio is grpo-adv's time over the plain one's. On a loaded
machine, ``--cpu-time`` runs one thread and times its CPU time (waits for the other
processes left out; memory and cache contention stays). The plain versions skip what
grpo-adv does besides: NaN rewards left out, exact 0 in zero-variance groups, the singleton
policy, infinite rewards spoiling their group. On the CPU, with finite rewards (these),
grpo-adv proves that no reward is NaN or infinite (from the group sums), that no group is a
singleton and none has zero variance (fixed groups: from the first two rewards of each;
others: from the variance), and skips those rules; fixed groups' statistics broadcast over
the ``(N / G, G)`` view as the plain versions' do. What is left: about 0.1 ms a call of
argument checks, that proof, and for variable groups the codes' checks and the singleton
warning's ``bincount``. A fresh tensor's page faults can cost more than its arithmetic,
and whether glibc returns freed memory (to fault again) depends on the call's history: the
times scatter 2-4x from run to run. ``MALLOC_TRIM_THRESHOLD_=4294967295
MALLOC_MMAP_THRESHOLD_=4294967295`` (glibc keeps what is freed) with ``--cpu-time`` gives
steady figures (``--steady-allocator`` sets both and runs again: the same allocator for
both sides, each call's arithmetic and no page faults); PyTorch's ``THP_MEM_ALLOC_ENABLE=1``
(huge pages) narrows the gaps. Measured: the same call of 1M rows faults 0, 1,953 or 3,906
pages (an 8 MB tensor is 1,953) from one call to the next under the default allocator.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from grpo_cli import group_advantages

EPS = 1e-4
STEADY = "4294967295"  # glibc's thresholds at their largest: freed memory is kept, reused
STEADY_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def trl_grpo(r: Any, g: int) -> Any:
    """TRL's GRPOTrainer (``scale_rewards="group"``), as it writes it."""
    mean = r.view(-1, g).mean(dim=1).repeat_interleave(g)
    std = r.view(-1, g).std(dim=1).repeat_interleave(g)
    return (r - mean) / (std + EPS)


def plain_dr_grpo(r: Any, g: int) -> Any:
    return r - r.view(-1, g).mean(dim=1).repeat_interleave(g)


def plain_rloo(r: Any, g: int) -> Any:
    view = r.view(-1, g)
    return (view - (view.sum(dim=1, keepdim=True) - view) / (g - 1)).reshape(-1)


def plain_batch_std(r: Any, g: int) -> Any:
    """TRL's ``scale_rewards="batch"``."""
    return plain_dr_grpo(r, g) / (r.std() + EPS)


def plain_reinforce_pp_baseline(r: Any, g: int) -> Any:
    x = plain_dr_grpo(r, g)
    return (x - x.mean()) / (x.std() + EPS)


FIXED: dict[str, Callable[[Any, int], Any]] = {
    "grpo": trl_grpo,
    "dr_grpo": plain_dr_grpo,
    "rloo": plain_rloo,
    "batch_std": plain_batch_std,
    "reinforce_pp_baseline": plain_reinforce_pp_baseline,
}


def scatter_grpo(r: Any, codes: Any, k: int) -> Any:
    """The group z-score with ``index_add_`` over dense ``codes`` (0..k-1)."""
    count = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, codes, torch.ones_like(r))
    mean = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, codes, r) / count
    d = r - mean[codes]
    var = torch.zeros(k, dtype=r.dtype, device=r.device).index_add_(0, codes, d * d)
    return d / ((var / (count - 1)).sqrt()[codes] + EPS)


def best_seconds(
    runs: dict[str, Callable[[], Any]], rounds: int, device: Any, clock: Callable[[], float]
) -> dict[str, float]:
    """The least seconds (by ``clock``) of each run over ``rounds`` interleaved rounds after
    a warm-up."""

    def timed(run: Callable[[], Any]) -> float:
        start = clock()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return clock() - start

    for run in runs.values():
        timed(run)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timed(run))
    return {name: min(values) for name, values in times.items()}


def variable_groups(n: int, g: int, generator: Any) -> tuple[Any, int]:
    """Dense group codes of sizes 2..2g over ``n`` shuffled rows, and their number."""
    sizes = torch.randint(2, 2 * g + 1, (n // 2 + 1,), generator=generator)
    k = int((sizes.cumsum(0) < n).sum()) + 1
    codes = torch.arange(k).repeat_interleave(sizes[:k])[:n]
    return codes[torch.randperm(n, generator=generator)], k


def measure(
    n: int, g: int, rounds: int, device: Any, clock: Callable[[], float]
) -> list[tuple[str, float, float]]:
    """(case, plain seconds, grpo-adv seconds) for ``n`` rows."""
    generator = torch.Generator().manual_seed(0)
    r = torch.rand(n, dtype=torch.float64, generator=generator).to(device)
    runs: dict[str, Callable[[], Any]] = {}
    cases = []
    for name, plain in FIXED.items():
        runs[f"plain {name}"] = partial(plain, r, g)
        runs[f"ours {name}"] = partial(
            group_advantages, r, group_size=g, estimator=name, nulls="exclude"
        )
        cases.append((f"fixed {name}", f"plain {name}", f"ours {name}"))
    layout = torch.arange(n // g, device=device).repeat_interleave(g)
    runs["ours grpo by groups"] = lambda: group_advantages(r, layout, nulls="exclude")
    cases.append(("fixed grpo, groups=", "plain grpo", "ours grpo by groups"))
    codes, k = variable_groups(n, g, generator)
    codes = codes.to(device)
    runs["scatter grpo"] = lambda: scatter_grpo(r, codes, k)
    runs["ours variable grpo"] = lambda: group_advantages(r, codes, nulls="exclude")
    cases.append(("variable grpo", "scatter grpo", "ours variable grpo"))
    single = r.float()
    runs["plain grpo float32"] = lambda: trl_grpo(single, g)
    cases.append(("plain grpo: float32 / float64", "plain grpo", "plain grpo float32"))
    seconds = best_seconds(runs, rounds, device, clock)
    return [(case, seconds[plain], seconds[ours]) for case, plain, ours in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="one thread, timed by its CPU time: a loaded machine's waits left out",
    )
    parser.add_argument(
        "--steady-allocator",
        action="store_true",
        help="run again with glibc keeping what is freed (MALLOC_TRIM_THRESHOLD_, "
        "MALLOC_MMAP_THRESHOLD_): no page faults from the allocator's history",
    )
    args = parser.parse_args()
    if args.steady_allocator and os.environ.get(STEADY_VARIABLES[0]) != STEADY:
        keep_freed = dict.fromkeys(STEADY_VARIABLES, STEADY)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **keep_freed})
    device = torch.device(args.device)
    clock = time.perf_counter
    if args.cpu_time:
        if device.type != "cpu":
            parser.error("--cpu-time times the CPU: leave --device out")
        torch.set_num_threads(1)
        clock = time.thread_time
    timing = "CPU time" if args.cpu_time else "wall clock"
    steady = os.environ.get(STEADY_VARIABLES[0]) == STEADY
    allocator = "glibc keeping freed memory" if steady else "default allocator"
    print(
        f"device {device}, {torch.get_num_threads()} threads, {timing}, "
        f"G={args.group_size}, {allocator}"
    )
    print(f"{'rows':>11} | {'case':<30} | {'plain s':>8} | {'ours s':>8} | ratio")
    for n in args.rows:
        for case, plain, ours in measure(n, args.group_size, args.rounds, device, clock):
            print(f"{n:>11,} | {case:<30} | {plain:8.4f} | {ours:8.4f} | {ours / plain:5.2f}")


if __name__ == "__main__":
    main()

"""Time the torch path stage by stage, and ``grpo-adv compute`` end to end against Polars.

    python benchmarks/gpu.py --device cuda                 # 10M and 100M rows
    python benchmarks/gpu.py --device cpu --rows 1000000   # any sizes

For each size, on a shuffled numeric log (:func:`bench_logs.write_log`, GRPO, groups by
(step, prompt_id) as the command line forms them), in one process with torch loaded:

- read: the Parquet file into memory (Polars);
- keys: the plan and the prepared frame (Polars: the 64-bit key hashes and the reward);
- transfer in: what the formula reads (the key hash, its check hash, the reward) to the
  device;
- codes: the group codes on the device (``torch.unique(return_inverse=True)``);
- kernel + transfer out: the formula, the group profile and the collision check, and
  the tensors back as Polars columns (the engine's
  :func:`grpo_cli.engines.torch.host_columns`: one function, so one stage);
- policies: the shared policies and the output frame (Polars);
- write: the annotated log to Parquet.

Each stage is the median of ``--rounds`` runs after a warm-up, synchronised on CUDA.
Then end to end, fresh processes, interleaved: ``grpo-adv compute IN -o OUT -f -q
--backend torch --device D`` and the same on the Polars engine (medians of ``--rounds``),
their ratio, and the ratio with torch's import (and CUDA's start) left out, measured in
fresh processes too.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logs import write_log

from grpo_cli.core.columns import REWARD_KEY, TORCH_RAW, VALID_KEY
from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.expressions import collect, prepare
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.policies import apply_policies
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.engines.torch import (
    float_column,
    host_columns,
    import_torch,
    key_tensor,
    resolve_device,
    torch_context,
)

OPTIONS = AdvantageOptions(group_cols=("step", "prompt_id"))


def median_seconds(run: Callable[[], Any], rounds: int, sync: Callable[[], None]) -> float:
    """The median time of ``run`` over ``rounds`` runs after one warm-up."""
    run()
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def stage_seconds(path: Path, device_name: str, rounds: int) -> tuple[dict[str, float], str]:
    """The seconds of each stage (see the module docstring), and where they ran."""
    torch = import_torch()
    device = resolve_device(torch, device_name)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    engine = EngineOptions(backend="torch", device=device_name)
    frame = pl.read_parquet(path)
    plan = resolve(make_request(options=OPTIONS, engine=engine), frame)
    prepared = collect(prepare(frame, plan), deterministic=False)
    ctx = torch_context(torch, prepared, plan, device)
    check = plan.keys.check
    key = key_tensor(torch, prepared, plan.keys.group, device)
    host = host_columns(ctx, prepared, plan)
    advantage = apply_policies(
        pl.col(TORCH_RAW).fill_nan(None),
        plan,
        reward=pl.col(REWARD_KEY),
        singleton=pl.col(VALID_KEY) == 1,
    )

    def policies() -> pl.DataFrame:
        full = prepared.hstack(host)
        return full.with_columns(advantage.alias(OPTIONS.advantage_col))

    annotated = policies().select([*frame.columns, OPTIONS.advantage_col])
    written = Path(tempfile.mkdtemp()) / "out.parquet"
    seconds = {
        "read": median_seconds(lambda: pl.read_parquet(path), rounds, sync),
        "keys": median_seconds(
            lambda: collect(
                prepare(frame, resolve(make_request(options=OPTIONS, engine=engine), frame)),
                deterministic=False,
            ),
            rounds,
            sync,
        ),
        "transfer in": median_seconds(
            lambda: (
                key_tensor(torch, prepared, plan.keys.group, device),
                check and key_tensor(torch, prepared, (check,), device),
                float_column(torch, prepared, pl.col(REWARD_KEY), device),
            ),
            rounds,
            sync,
        ),
        "codes": median_seconds(lambda: torch.unique(key, return_inverse=True), rounds, sync),
        "kernel + transfer out": median_seconds(
            lambda: host_columns(replace(ctx), prepared, plan), rounds, sync
        ),
        "policies": median_seconds(policies, rounds, sync),
        "write": median_seconds(lambda: annotated.write_parquet(written), rounds, sync),
    }
    label = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    return seconds, f"{label}, torch {torch.__version__}, Polars {pl.__version__}"


def fresh_seconds(command: list[str]) -> float:
    """The wall time of ``command`` as a fresh process."""
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def import_seconds(device: str, rounds: int) -> float:
    """The median time of ``import torch`` (and CUDA's start on a GPU) in a fresh process,
    less a bare interpreter's start."""
    start_cuda = "; torch.zeros(1, device='cuda')" if device == "cuda" else ""
    loaded = [
        fresh_seconds([sys.executable, "-c", "import torch" + start_cuda]) for _ in range(rounds)
    ]
    bare = [fresh_seconds([sys.executable, "-c", "pass"]) for _ in range(rounds)]
    return statistics.median(loaded) - statistics.median(bare)


def end_to_end(path: Path, device: str, rounds: int) -> tuple[float, float]:
    """Median seconds of ``compute`` on torch and on Polars, fresh processes, interleaved."""
    cli = [sys.executable, "-m", "grpo_cli", "compute", str(path), "-f", "-q", "-o"]
    out = Path(tempfile.mkdtemp())
    torch_times, polars_times = [], []
    for _ in range(rounds):
        torch_args = ["--backend", "torch", "--device", device]
        torch_times.append(fresh_seconds([*cli, str(out / "torch.parquet"), *torch_args]))
        polars_times.append(fresh_seconds([*cli, str(out / "polars.parquet")]))
    return statistics.median(torch_times), statistics.median(polars_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, nargs="+", help="log sizes (default: 10M, and 100M on CUDA)"
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    args = parser.parse_args()
    sizes = args.rows or ([10_000_000, 100_000_000] if args.device == "cuda" else [10_000_000])
    loading = import_seconds(args.device, args.rounds)
    for rows in sizes:
        path = write_log(args.data / f"shuffled_{rows}.parquet", rows)
        seconds, where = stage_seconds(path, args.device, args.rounds)
        torch_e2e, polars_e2e = end_to_end(path, args.device, args.rounds)
        print(f"{rows:,} rows on {where} (medians of {args.rounds})")
        for name, value in seconds.items():
            print(f"  {name:<21} {value:8.3f} s")
        print(f"  {'stages':<21} {sum(seconds.values()):8.3f} s")
        print(f"  import torch  {loading:8.3f} s (fresh process)")
        print(f"end to end: torch {torch_e2e:.2f} s, Polars {polars_e2e:.2f} s")
        print(f"  torch / Polars: {torch_e2e / polars_e2e:.2f}")
        print(f"  without the import: {(torch_e2e - loading) / polars_e2e:.2f}")


if __name__ == "__main__":
    main()

"""Time the torch path: the segment kernel alone, and ``grpo-adv compute`` end to end.

    python benchmarks/gpu.py --device cuda --rows 10000000

The kernel time excludes host-device copies and group coding (Polars); it is the median of
``--rounds`` runs after a warm-up, with ``torch.cuda.synchronize`` around each on CUDA. The
end-to-end time runs ``grpo-adv compute IN -o OUT --backend torch --device D`` as a fresh
process, next to the Polars backend on the same file.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets import write_log

from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.expressions import annotate_lazy, collect, prepare
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import make_plan
from grpo_cli.engines.torch import formula_columns, import_torch, resolve_device, torch_context


def kernel_seconds(path: Path, device_name: str, rounds: int) -> tuple[float, str]:
    torch = import_torch()
    device = resolve_device(torch, device_name)
    options = AdvantageOptions()
    frame = pl.read_parquet(path)
    plan = make_plan(frame, options, engine=EngineOptions(backend="torch", device=device_name))
    prepared = collect(prepare(frame, plan))
    ctx = torch_context(torch, prepared, plan, device)

    def kernel() -> None:  # a fresh context: its group statistics are computed again
        formula_columns(replace(ctx), prepared, plan)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    kernel()  # warm-up
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        kernel()
        sync()
        times.append(time.perf_counter() - start)
    # The same arithmetic on Polars, for scale (in-memory frame, streaming engine).
    polars_times = []
    for _ in range(rounds):
        start = time.perf_counter()
        lazy = annotate_lazy(frame, make_plan(frame, AdvantageOptions()))
        collect(lazy, deterministic=False)
        polars_times.append(time.perf_counter() - start)
    label = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    return statistics.median(
        times
    ), f"{label}; Polars compute {statistics.median(polars_times):.3f} s"


def end_to_end(path: Path, args: list[str], rounds: int) -> float:
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    out = Path(tempfile.mkdtemp()) / "out.parquet"
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([cli, "compute", str(path), "-o", str(out), "-f", "-q", *args], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    args = parser.parse_args()
    path = write_log(args.data / f"shuffled_{args.rows}.parquet", args.rows)
    kernel, where = kernel_seconds(path, args.device, args.rounds)
    torch_e2e = end_to_end(path, ["--backend", "torch", "--device", args.device], args.rounds)
    polars_e2e = end_to_end(path, [], args.rounds)
    print(f"{args.rows:,} rows on {where}")
    print(f"torch kernel alone:       {kernel:.4f} s ({args.rows / kernel / 1e6:.0f} M rows/s)")
    print(f"end to end, --backend torch:  {torch_e2e:.2f} s")
    print(f"end to end, --backend polars: {polars_e2e:.2f} s")


if __name__ == "__main__":
    main()

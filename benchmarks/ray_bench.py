"""The Ray engine on this machine: ``grpo-adv compute --backend ray`` (an embedded local Ray
on every core) against the Polars engine, on a log in shards; and on a log too large for
one process, with the driver's memory bounded.

    python benchmarks/ray_bench.py --rows 10000000 --shards 16 [--big-rows 200000000]

Figures: wall time, the driver's peak RSS (the ``grpo-adv`` process itself: Ray's workers
and object store are separate processes), rows per second per worker core, and bytes
shuffled per row (the Arrow size of a row: Ray Data's hash shuffle moves every column).
The check: every row once, advantages equal to the Polars engine's within 1e-12 (joined on
a row id); for the big log, a sample of groups recomputed in memory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets import make_log, write_big_log

from grpo_cli.jobs.pipeline import annotate

# Runs the CLI and reports this process's own peak RSS (KiB) on its last stderr line: the
# kernel's VmHWM, which starts again at exec (ru_maxrss keeps the forking parent's).
DRIVER = (
    "import atexit, sys\n"
    "hwm = lambda: next(l.split()[1] for l in open('/proc/self/status') if "
    "l.startswith('VmHWM'))\n"
    "atexit.register(lambda: sys.stderr.write(f'\\nMAXRSS {hwm()}\\n'))\n"
    "from grpo_cli.cli import main\n"
    "sys.argv = ['grpo-adv', *sys.argv[1:]]\n"
    "main()\n"
)


def run_cli(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the driver's peak RSS in GiB of ``grpo-adv ARGS``."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    line = [x for x in done.stderr.splitlines() if x.startswith("MAXRSS ")][-1]
    return seconds, int(line.split()[1]) / 2**20


def write_shards(log: pl.DataFrame, folder: Path, shards: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-log.height // shards)
    paths = []
    for k in range(shards):
        path = folder / f"shard-{k:03d}.parquet"
        if not path.exists():
            log.slice(k * size, size).write_parquet(path)
        paths.append(path)
    return paths


def shards_bench(rows: int, shards: int, data: Path, cores: int) -> list[str]:
    folder = data / f"shards_{rows}_{shards}"
    if not (folder / f"shard-{shards - 1:03d}.parquet").exists():
        log = make_log(rows, order="shuffled").with_row_index("rid")
        write_shards(log, folder, shards)
        del log
    paths = sorted(folder.glob("shard-*.parquet"))
    sample = [pl.read_parquet(p).to_arrow() for p in paths[:2]]
    per_row = sum(t.nbytes for t in sample) / sum(t.num_rows for t in sample)
    polars_out, ray_out = data / "polars_out.parquet", data / "ray_out"
    p_s, p_gib = run_cli(["compute", *map(str, paths), "-o", str(polars_out), "-q", "-f"])
    r_s, r_gib = run_cli(
        ["compute", str(folder), "--backend", "ray", "-o", str(ray_out), "-q", "-f"]
    )
    expected = pl.read_parquet(polars_out).select("rid", "advantage")
    got = pl.scan_parquet(ray_out / "*.parquet").select("rid", "advantage").collect()
    joined = expected.join(got, on="rid", how="full", suffix="_ray")
    assert got.height == rows and joined.height == rows, "every row exactly once"
    worst = joined.select((pl.col("advantage") - pl.col("advantage_ray")).abs().max()).item()
    lines = [
        f"## {rows:,} shuffled rows in {shards} Parquet shards ({cores} cores)",
        "",
        "| engine | time | driver peak RSS | rows/s per core |",
        "|---|---|---|---|",
        f"| polars (one process) | {p_s:.1f} s | {p_gib:.2f} GiB | {rows / p_s / cores:,.0f} |",
        f"| ray (embedded local Ray) | {r_s:.1f} s | {r_gib:.2f} GiB | {rows / r_s / cores:,.0f} |",
        "",
        f"- ray / polars: {r_s / p_s:.2f}x the time",
        f"- bytes shuffled per row: {per_row:.1f} (Arrow size of a row; every column moves)",
        f"- max |ray - polars| over every row: {worst:.1e}",
    ]
    return lines


def big_bench(rows: int, data: Path, cores: int, sample: int = 500) -> list[str]:
    source = write_big_log(data / f"big_{rows}.parquet", rows)
    out = data / "ray_big_out"
    r_s, r_gib = run_cli(["compute", str(source), "--backend", "ray", "-o", str(out), "-q", "-f"])
    written = pl.scan_parquet(out / "*.parquet")
    count = written.select(pl.len()).collect().item()
    ids = (pl.scan_parquet(source).select(pl.col("prompt_id").unique()).head(sample).collect())[
        "prompt_id"
    ]
    chosen = pl.col("prompt_id").is_in(ids.implode())
    inputs = pl.scan_parquet(source).filter(chosen).collect()
    expected = annotate(inputs).frame.sort("prompt_id", "reward", "advantage")
    got = written.filter(chosen).collect().sort("prompt_id", "reward", "advantage")
    worst = float((got["advantage"] - expected["advantage"]).abs().max() or 0.0)  # type: ignore[arg-type]
    size = source.stat().st_size / 2**30
    return [
        f"## {rows:,} shuffled rows, one {size:.1f} GiB Parquet file ({cores} cores)",
        "",
        f"- ray: {r_s:.0f} s, {rows / r_s / cores:,.0f} rows/s per core, driver peak RSS "
        f"{r_gib:.2f} GiB",
        f"- rows written: {count:,} (of {rows:,}); {sample} groups recomputed in memory: "
        f"max |difference| {worst:.1e}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--big-rows", type=int, default=0, help="0: skip the big log")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    lines = shards_bench(args.rows, args.shards, args.data, cores)
    if args.big_rows:
        lines += ["", *big_bench(args.big_rows, args.data, cores)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report is not None:
        args.report.write_text(text)


if __name__ == "__main__":
    main()

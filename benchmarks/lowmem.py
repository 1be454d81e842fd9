"""Bounded memory on a huge log: ``grpo-adv compute --low-memory`` against the streaming
I/O floor (Polars scan -> sink), with peak RSS, and a check of the result.

    python benchmarks/lowmem.py --rows 200000000

The check recomputes, in memory, every group of a random sample of prompt ids from the
input and compares with the low-memory output (same rows, same order, |difference| <= 1e-12).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets import write_big_log

from grpo_cli.pipeline import annotate


def timed(argv: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *argv], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1024 / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000_000)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--sample-groups", type=int, default=2000)
    args = parser.parse_args()
    start = time.perf_counter()
    source = write_big_log(args.data / f"big_{args.rows}.parquet", args.rows)
    print(
        f"log: {source} ({source.stat().st_size / 2**30:.2f} GiB, made in "
        f"{time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    out = args.data / "lowmem_out.parquet"
    floor_code = "import sys, polars as pl; pl.scan_parquet(sys.argv[1]).sink_parquet(sys.argv[2])"
    floor_s, floor_gib = timed(
        [sys.executable, "-c", floor_code, str(source), str(args.data / "floor_out.parquet")]
    )
    print(f"streaming floor (scan -> sink): {floor_s:.1f} s, peak {floor_gib:.2f} GiB", flush=True)
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    low_s, low_gib = timed([cli, "compute", str(source), "-o", str(out), "-f", "--low-memory"])
    print(
        f"grpo-adv --low-memory: {low_s:.1f} s ({low_s / floor_s:.2f}x floor), "
        f"peak {low_gib:.2f} GiB",
        flush=True,
    )
    ids = (
        pl.scan_parquet(source)
        .select("prompt_id")
        .head(5_000_000)
        .unique()
        .collect()["prompt_id"]
        .sample(args.sample_groups, seed=1)
    )
    rows = (
        pl.scan_parquet(source)
        .with_row_index("row")
        .filter(pl.col("prompt_id").is_in(ids.implode()))
        .collect(engine="streaming")
    )
    got = (
        pl.scan_parquet(out)
        .with_row_index("row")
        .filter(pl.col("prompt_id").is_in(ids.implode()))
        .collect(engine="streaming")
    )
    expected = annotate(rows.drop("row"), deterministic=True).frame
    same_rows = got["row"].equals(rows["row"])
    diff = float((got["advantage"] - expected["advantage"]).abs().max() or 0.0)  # type: ignore[arg-type]
    print(
        f"check on {len(ids)} groups ({rows.height:,} rows): rows and order equal: {same_rows}; "
        f"max |difference| {diff:.3g}",
        flush=True,
    )


if __name__ == "__main__":
    main()

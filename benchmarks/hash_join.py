"""What grouping costs on a shuffled log, with Polars alone and no memory bound: the design
``--low-memory`` could take if the groups' statistics fitted in memory.

    python benchmarks/hash_join.py --rows 200000000 --data /work/bigdata

On the log ``lowmem.py`` makes (``big_ROWS.parquet``; made here if missing), with Polars'
streaming engine, each timed in its own process with its peak RSS:

1. the streaming floor (scan -> sink, as ``lowmem.py``);
2. a group-by of a 64-bit hash of the prompt id, counting the rows (the least grouping any
   design does);
3. the whole design: the groups' mean and std by that hash, then the log scanned again,
   joined to them in input order, the advantage computed and the file sunk.

A ``--low-memory`` route that reads the log and writes it back with its advantages cannot be
faster than 1 + 2, and this design (3) is not bounded in memory: its tables grow with the
groups (about 16 rows a group here).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logs import write_big_log

STEPS = {
    "streaming floor (scan -> sink)": """
pl.scan_parquet(src).sink_parquet(out)
""",
    "group-by of the key's hash (a count a group)": """
h = pl.col("prompt_id").hash().alias("h")
pl.scan_parquet(src).group_by(h).agg(pl.len()).select(pl.len()).collect(engine="streaming")
""",
    "hash group-by, ordered join, advantage, sink": """
h = pl.col("prompt_id").hash().alias("h")
r = pl.col("reward")
stats = pl.scan_parquet(src).group_by(h).agg(m=r.mean(), s=r.std()).collect(engine="streaming")
adv = (r - pl.col("m")) / (pl.col("s").fill_null(0.0) + 1e-8)
(pl.scan_parquet(src).with_columns(h).join(stats.lazy(), on="h", how="left", maintain_order="left")
 .with_columns(advantage=adv).drop("h", "m", "s").sink_parquet(out))
""",
}


def timed(code: str, source: Path, output: Path) -> tuple[float, float]:
    """Seconds and peak RSS (GiB) of ``code`` run in a fresh process."""
    script = f"import sys, polars as pl\nsrc, out = sys.argv[1], sys.argv[2]\n{code}"
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", sys.executable, "-c", script, str(source), str(output)],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000_000)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    source = write_big_log(args.data / f"big_{args.rows}.parquet", args.rows)
    output = args.data / "hash_join_out.parquet"
    floor = 0.0
    try:
        for name, code in STEPS.items():
            seconds, gib = timed(code, source, output)
            floor = floor or seconds
            print(f"{name}: {seconds:.1f} s ({seconds / floor:.2f}x), peak {gib:.2f} GiB")
    finally:
        output.unlink(missing_ok=True)


if __name__ == "__main__":
    main()

"""Bounded memory on a huge log: ``grpo-adv compute --low-memory`` against the streaming
I/O floor (Polars scan -> sink), with peak RSS, and a check of the result.

    python benchmarks/lowmem.py --rows 200000000                  # shuffled: partitioned
    python benchmarks/lowmem.py --rows 1000000000 --order step    # step order: one pass
    python benchmarks/lowmem.py --rows 1000000000 --order step -g prompt_id  # partitioned

``-g prompt_id`` groups by the prompt id alone (the same groups: the benchmark's prompt ids
are unique across steps), so that the step-ordered log takes the partitioned route.
The output floor copies the low-memory output the same way as the streaming floor (it
writes the advantage column too, about 60% of the output's bytes): no computation on this
log can be faster than it.

The check recomputes, in memory, every group of a random sample of prompt ids from the
input and compares with the low-memory output (same rows, same order, |difference| <= 1e-12).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logs import write_big_log, write_step_log

from grpo_cli.jobs.pipeline import annotate


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    seconds, gib, _ = timed_run(argv, env)
    return seconds, gib


def timed_run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``argv``: its seconds, peak RSS in GiB and standard error."""
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *argv], capture_output=True, text=True, check=False, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    return seconds, int(lines[-1]) / 1024 / 1024, "\n".join(lines[:-1])


@dataclass
class LowMemResult:
    """One --low-memory run against the streaming floor, and its check."""

    floor_seconds: float
    floor_gib: float
    seconds: float
    gib: float
    groups: int
    rows: int
    same_rows: bool
    diff: float
    against_seconds: float | None = None
    route: str = ""
    output_floor_seconds: float = 0.0


def measure(
    rows: int,
    data: Path,
    sample_groups: int = 2000,
    against: Path | None = None,
    order: str = "shuffled",
    group_cols: tuple[str, ...] = (),
) -> LowMemResult:
    """Make (or reuse) the log of ``rows`` rows in ``data`` (``order``: ``shuffled``, rows
    of a group anywhere; ``step``, written step by step), run the floor, grpo-adv
    --low-memory and the floor again (the floor's time: the mean of the two), and check a
    sample of groups against an in-memory computation. With ``against`` (another checkout),
    its ``grpo_cli`` runs the same command right after this one's."""
    start = time.perf_counter()
    if order == "step":
        source = write_step_log(data / f"step_{rows}.parquet", rows)
    else:
        source = write_big_log(data / f"big_{rows}.parquet", rows)
    print(
        f"log: {source} ({source.stat().st_size / 2**30:.2f} GiB, ready in "
        f"{time.perf_counter() - start:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    out = data / "lowmem_out.parquet"
    floor_out = data / "floor_out.parquet"
    floor_code = "import sys, polars as pl; pl.scan_parquet(sys.argv[1]).sink_parquet(sys.argv[2])"
    try:
        # The floor before and after the run, averaged: it moves by up to 25% between
        # runs on a shared machine, and a ratio to one floor run moves with it.
        floor = [sys.executable, "-c", floor_code, str(source), str(floor_out)]
        before_s, before_gib = timed(floor)
        cli = str(Path(sys.executable).with_name("grpo-adv"))
        command = [cli, "compute", str(source), "-o", str(out), "-f", "--low-memory"]
        command += [arg for col in group_cols for arg in ("-g", col)]
        low_s, low_gib, said = timed_run(command, {**os.environ, "COLUMNS": "200"})
        route = next((line for line in said.splitlines() if "│ route" in line), "")
        route = route.split("│")[2].strip() if route else "(not said)"
        against_s = None
        if against is not None:
            against_s, _ = timed(command, {**os.environ, "PYTHONPATH": str(against)})
        after_s, after_gib = timed(floor)
        floor_out.unlink()
        output_floor_s, _ = timed([sys.executable, "-c", floor_code, str(out), str(floor_out)])
        floor_out.unlink()
        floor_s, floor_gib = (before_s + after_s) / 2, max(before_gib, after_gib)
        ids = (
            pl.scan_parquet(source)
            .select("prompt_id")
            .head(5_000_000)
            .unique()
            .collect()["prompt_id"]
            .sample(sample_groups, seed=1)
        )
        picked = (
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
    finally:
        out.unlink(missing_ok=True)
        floor_out.unlink(missing_ok=True)
    expected = annotate(picked.drop("row"), deterministic=True).frame
    diff = float((got["advantage"] - expected["advantage"]).abs().max() or 0.0)  # type: ignore[arg-type]
    return LowMemResult(
        floor_s,
        floor_gib,
        low_s,
        low_gib,
        len(ids),
        picked.height,
        got["row"].equals(picked["row"]),
        diff,
        against_s,
        route,
        output_floor_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000_000)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--sample-groups", type=int, default=2000)
    parser.add_argument("--order", choices=("shuffled", "step"), default="shuffled")
    parser.add_argument("-g", "--group-col", action="append", default=[], help="grpo-adv's -g")
    args = parser.parse_args()
    r = measure(
        args.rows, args.data, args.sample_groups, order=args.order, group_cols=tuple(args.group_col)
    )
    print(f"streaming floor (scan -> sink): {r.floor_seconds:.1f} s, peak {r.floor_gib:.2f} GiB")
    print(
        f"output floor (the output copied the same way): {r.output_floor_seconds:.1f} s "
        f"({r.output_floor_seconds / r.floor_seconds:.2f}x the streaming floor)"
    )
    print(
        f"grpo-adv --low-memory: {r.seconds:.1f} s ({r.seconds / r.floor_seconds:.2f}x floor), "
        f"peak {r.gib:.2f} GiB; route: {r.route}"
    )
    print(
        f"check on {r.groups} groups ({r.rows:,} rows): rows and order equal: {r.same_rows}; "
        f"max |difference| {r.diff:.3g}"
    )


if __name__ == "__main__":
    main()

"""``make bench``: grpo-adv against the alternatives, as ratios measured in one run.

Every measurement is a fresh process run as a user would run it (interpreter start and
imports included), timed wall-clock, with its peak RSS (``wait4``). Each round runs every
method once on the same warm input; a method's ratio is its time over the Polars
read + write floor *of the same round*; the table shows medians over rounds.

Methods (all write Parquet with their library's default writer):

- ``floor``: Polars ``read_parquet`` + ``write_parquet``, no computation.
- ``floor, zstd level 1``: the same, written at the zstd level grpo-adv writes (Polars'
  default is 3): what the floor would be with grpo-adv's writer setting.
- ``grpo-adv``: ``grpo-adv compute IN -o OUT -f`` (the terminal summary included).
- ``grpo-adv -q``: the same with ``--quiet`` (no summary figures computed).
- ``pandas``: ``groupby(prompt_id).transform`` mean and std.
- ``duckdb``: window functions, ``ORDER BY file_row_number``, ``COPY TO``.

All methods compute ``(r - mean_g) / (std_g + 1e-8)`` (sample std; a one-response group
gives 0) and the outputs are checked to agree (max |difference| printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets import write_log

PANDAS = """
import sys, pandas as pd
df = pd.read_parquet(sys.argv[1])
g = df.groupby("prompt_id", sort=False)["reward"]
mean, std = g.transform("mean"), g.transform("std")
df["advantage"] = ((df["reward"] - mean) / (std + 1e-8)).fillna(0.0)
df.to_parquet(sys.argv[2], index=False)
"""
DUCKDB = """
import sys, duckdb
duckdb.sql(f'''
COPY (
  SELECT * EXCLUDE (file_row_number), coalesce(
    (reward - avg(reward) OVER w) / (stddev_samp(reward) OVER w + 1e-8), 0.0) AS advantage
  FROM read_parquet('{sys.argv[1]}', file_row_number = true)
  WINDOW w AS (PARTITION BY prompt_id)
  ORDER BY file_row_number
) TO '{sys.argv[2]}' (FORMAT parquet)''')
"""
FLOOR = """
import sys, polars as pl
pl.read_parquet(sys.argv[1]).write_parquet(sys.argv[2])
"""
FLOOR_ZSTD1 = """
import sys, polars as pl
pl.read_parquet(sys.argv[1]).write_parquet(sys.argv[2], compression_level=1)
"""


@dataclass
class Run:
    seconds: float
    peak_mib: float


def run_process(argv: list[str]) -> Run:
    """Run argv to completion; wall time and peak RSS (GNU time's %M, which measures the
    command itself, not this benchmark's forked copy)."""
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {done.stderr[-2000:]}")
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    return Run(seconds, peak_kib / 1024)


def methods(src: Path, out: Path, text: bool) -> dict[str, list[str]]:
    py = sys.executable
    cli = str(Path(py).with_name("grpo-adv"))
    chosen = {
        "floor": [py, "-c", FLOOR, str(src), str(out / "floor.parquet")],
        "floor, zstd level 1": [py, "-c", FLOOR_ZSTD1, str(src), str(out / "floor1.parquet")],
        "grpo-adv": [cli, "compute", str(src), "-o", str(out / "grpo.parquet"), "-f"],
        "grpo-adv -q": [cli, "compute", str(src), "-o", str(out / "grpo_q.parquet"), "-f", "-q"],
        "pandas": [py, "-c", PANDAS, str(src), str(out / "pandas.parquet")],
        "duckdb": [py, "-c", DUCKDB, str(src), str(out / "duckdb.parquet")],
    }
    if text:  # pandas and DuckDB move 1.2 KB of text a row; keep the text run short
        chosen.pop("grpo-adv -q")
    return chosen


def agreement(out: Path, names: list[str]) -> float:
    """Max |difference| of every method's advantage from grpo-adv's (nulls as 0)."""
    files = {"grpo-adv": "grpo", "grpo-adv -q": "grpo_q", "pandas": "pandas", "duckdb": "duckdb"}
    reference = pl.read_parquet(out / "grpo.parquet", columns=["advantage"])["advantage"]
    reference = reference.fill_null(0.0)
    worst = 0.0
    for name in names:
        if name in files and name != "grpo-adv":
            other = pl.read_parquet(out / f"{files[name]}.parquet", columns=["advantage"])
            diff = (other["advantage"].fill_null(0.0) - reference).abs().max()
            worst = max(worst, float(diff))  # type: ignore[arg-type]
    return worst


def bench_set(label: str, src: Path, rounds: int, text: bool) -> list[str]:
    """Run every method ``rounds`` times on ``src``; return the report's lines."""
    out = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    try:
        cmds = methods(src, out, text)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        ratios: dict[str, list[float]] = {name: [] for name in cmds}
        peaks: dict[str, float] = dict.fromkeys(cmds, 0.0)
        for _ in range(rounds):
            measured = {name: run_process(argv) for name, argv in cmds.items()}
            floor = measured["floor"].seconds
            for name, run in measured.items():
                times[name].append(run.seconds)
                ratios[name].append(run.seconds / floor)
                peaks[name] = max(peaks[name], run.peak_mib)
        diff = agreement(out, list(cmds))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in ratios.items()}
    lines = [
        f"### {label}",
        "",
        "| method | median s | x floor | peak RSS MiB |",
        "|---|---|---|---|",
    ]
    for name in cmds:
        lines.append(
            f"| {name} | {statistics.median(times[name]):.2f} | {med[name]:.2f} | "
            f"{peaks[name]:.0f} |"
        )
    lines.append("")
    lines.append(f"- all methods agree with grpo-adv to {diff:.1e} (max |difference|)")
    for other in ("pandas", "duckdb"):
        if other in med:
            speedup = statistics.median(
                o / g for o, g in zip(ratios[other], ratios["grpo-adv"], strict=True)
            )
            lines.append(f"- grpo-adv is {speedup:.2f}x faster than {other}")
    lines.append("")
    return lines


def help_time(rounds: int = 7) -> float:
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    return statistics.median(run_process([cli, "--help"]).seconds for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the numeric set")
    parser.add_argument("--text-rows", type=int, default=1_000_000, help="rows of the text set")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--report", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()

    numeric = write_log(args.data / f"shuffled_{args.rows}.parquet", args.rows)
    grouped = write_log(args.data / f"grouped_{args.rows}.parquet", args.rows, order="grouped")
    text = write_log(args.data / f"text_{args.text_rows}.parquet", args.text_rows, text=True)
    lines = [
        f"grpo-adv bench: {os.cpu_count()} cores, Polars {pl.__version__}, "
        f"{args.rounds} rounds, medians",
        "",
    ]
    sets = [
        (f"{args.rows:,} rows, shuffled, numeric (target: grpo-adv <= 1.5x floor)", numeric, False),
        (f"{args.rows:,} rows, grouped by prompt", grouped, False),
        (
            f"{args.text_rows:,} rows with prompt/completion text (target: <= 1.15x floor)",
            text,
            True,
        ),
    ]
    for label, path, has_text in sets:
        print(f"running: {label}", file=sys.stderr, flush=True)
        lines += bench_set(label, path, args.rounds, has_text)
    seconds = help_time()
    verdict = "met" if seconds < 0.3 else "NOT met"
    lines.append(f"`grpo-adv --help`: {seconds:.3f} s (target < 0.3 s: {verdict})")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(report)


if __name__ == "__main__":
    main()

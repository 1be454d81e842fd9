"""``make bench``: grpo-adv against the alternatives, as ratios measured in one run.

Every measurement is a fresh process run as a user would run it (interpreter start and
imports included), timed wall-clock, with its peak RSS (``wait4``). Each round runs every
method once on the same warm input; a method's ratio is its time over the Polars
read + write floor *of the same round*; the table shows medians over rounds.

The sets: 10M numeric rows in the three orders real logs have (shuffled; shuffled within
each step; grouped by prompt: see ``bench_logs.make_log``), 1M rows with text; then the
reading jobs (summarize, summarize -o, verify, plot) against compute on the shuffled log,
a 10-row CSV end to end, and (``--big-rows``) ``--low-memory`` on a log larger than memory
against the streaming floor (``lowmem.py``). Each figure is printed with its target.

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

``--against CHECKOUT`` also runs every grpo-adv command with another checkout's ``grpo_cli``
(e.g. ``git worktree add /tmp/before <rev>``), in the same rounds, right after this one's,
and ends with a table of this checkout's time over that one's per row: the way a change
shows that it costs no speed (a ratio above 1.05 is flagged).
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
from typing import Final

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logs import write_log

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


AGAINST_TAG = " (against)"
# The checkout whose grpo_cli the " (against)" methods import (``--against``), if any.
against: Path | None = None


def run_process(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """Run argv to completion; wall time and peak RSS (GNU time's %M, which measures the
    command itself, not this benchmark's forked copy)."""
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        env=env,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {done.stderr[-2000:]}")
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    return Run(seconds, peak_kib / 1024)


def env_for(name: str) -> dict[str, str] | None:
    """The environment of method ``name``: the ``--against`` checkout first on the path for
    its " (against)" twin (the same console script, another ``grpo_cli``)."""
    if not name.endswith(AGAINST_TAG) or against is None:
        return None
    return {**os.environ, "PYTHONPATH": str(against)}


def in_round_order(names: list[str], round_index: int) -> list[str]:
    """``names`` in the order round ``round_index`` runs them: each " (against)" twin right
    after its method in even rounds, right before it in odd ones. Neither checkout always
    runs second: the second of two runs back to back finds the page cache and the disk's
    write-back in another state (verify on 10M rows took 4.1 s first and 2.9 s second,
    whichever checkout it was)."""
    if round_index % 2 == 0:
        return names
    ordered = list(names)
    for i, name in enumerate(ordered):
        if name.endswith(AGAINST_TAG) and i > 0 and ordered[i - 1] + AGAINST_TAG == name:
            ordered[i - 1], ordered[i] = name, ordered[i - 1]
    return ordered


def paired_ratio(mine: list[float], theirs: list[float]) -> float:
    """This checkout's time over the other's, from rounds in :func:`in_round_order`: per
    pair of rounds (one where this checkout ran first, one where it ran second) the
    geometric mean of the two rounds' ratios, which cancels a cost of running first or
    second; the median over the pairs. An odd last round is left out."""
    ratios = [m / t for m, t in zip(mine, theirs, strict=True)]
    pairs = [(ratios[i] * ratios[i + 1]) ** 0.5 for i in range(0, len(ratios) - 1, 2)]
    return statistics.median(pairs) if pairs else ratios[0]


def even_rounds(rounds: int) -> int:
    """``rounds``, made even when another checkout is measured (see :func:`paired_ratio`)."""
    return rounds + rounds % 2 if against is not None else rounds


def with_twins(cmds: dict[str, list[str]], out: Path) -> dict[str, list[str]]:
    """``cmds`` with, after each grpo-adv command, its " (against)" twin writing elsewhere."""
    if against is None:
        return cmds
    twinned: dict[str, list[str]] = {}
    for name, argv in cmds.items():
        twinned[name] = argv
        if argv[0].endswith("grpo-adv"):
            twin = [a.replace(str(out), str(out / "against")) for a in argv]
            twinned[name + AGAINST_TAG] = twin
    (out / "against").mkdir(exist_ok=True)
    return twinned


def methods(src: Path, out: Path, *, text: bool, pandas: bool) -> dict[str, list[str]]:
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
    if not pandas:
        chosen.pop("pandas")
    return with_twins(chosen, out)


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


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


@dataclass
class SetResult:
    """One set's report lines and its headline ratios (medians over rounds)."""

    lines: list[str]
    x_floor: float
    duckdb_speedup: float | None
    against: list[tuple[str, float]]


def bench_set(label: str, src: Path, rounds: int, *, text: bool, pandas: bool) -> SetResult:
    """Run every method ``rounds`` times on ``src``; the report's lines and ratios."""
    out = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    try:
        cmds = methods(src, out, text=text, pandas=pandas)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        ratios: dict[str, list[float]] = {name: [] for name in cmds}
        peaks: dict[str, float] = dict.fromkeys(cmds, 0.0)
        for index in range(even_rounds(rounds)):
            measured = {
                name: run_process(cmds[name], env_for(name))
                for name in in_round_order(list(cmds), index)
            }
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
    speedups = {}
    for other in ("pandas", "duckdb"):
        if other in med:
            speedups[other] = statistics.median(
                o / g for o, g in zip(ratios[other], ratios["grpo-adv"], strict=True)
            )
            lines.append(f"- grpo-adv is {speedups[other]:.2f}x faster than {other}")
    lines.append("")
    return SetResult(lines, med["grpo-adv"], speedups.get("duckdb"), against_rows(label, ratios))


def against_rows(label: str, ratios: dict[str, list[float]]) -> list[tuple[str, float]]:
    """Per grpo-adv method: the median over rounds of this checkout's time over the
    ``--against`` checkout's, measured in the same round."""
    return [
        (f"{label}: {name}", paired_ratio(ratios[name], ratios[twin]))
        for name in ratios
        if (twin := name + AGAINST_TAG) in ratios
    ]


def reading_jobs(src: Path, rounds: int) -> tuple[list[str], list[tuple[str, float]]]:
    """summarize (to the terminal, and its step table written with -o), verify and plot
    against compute on the same log, ``rounds`` times each, interleaved (targets: summarize
    no slower and no larger than compute, with or without -o; verify <= 1.2x compute, plot
    <= summarize + 1 s)."""
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    out = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    annotated = out / "annotated.parquet"
    try:
        run_process([cli, "compute", str(src), "-o", str(annotated), "-q"])
        jobs = with_twins(
            {
                "compute": [cli, "compute", str(src), "-o", str(out / "c.parquet"), "-f"],
                "summarize": [cli, "summarize", str(src)],
                "summarize -o": [cli, "summarize", str(src), "-o", str(out / "s.csv"), "-f"],
                "verify": [cli, "verify", str(annotated)],
                "plot": [cli, "plot", str(src), "-o", str(out / "plot.png"), "-f"],
            },
            out,
        )
        for name in [n for n in jobs if n.endswith(AGAINST_TAG)]:  # the same annotated input
            jobs[name] = [str(annotated) if "annotated" in a else a for a in jobs[name]]
        runs: dict[str, list[Run]] = {name: [] for name in jobs}
        for index in range(even_rounds(rounds)):
            for name in in_round_order(list(jobs), index):
                runs[name].append(run_process(jobs[name], env_for(name)))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    sec = {name: statistics.median(r.seconds for r in rs) for name, rs in runs.items()}
    peak = {name: max(r.peak_mib for r in rs) for name, rs in runs.items()}
    lines = [
        f"### Reading jobs on {src.name}",
        "",
        "| command | median s | x compute | peak RSS MiB |",
        "|---|---|---|---|",
    ]
    for name in jobs:
        lines.append(
            f"| {name} | {sec[name]:.2f} | {sec[name] / sec['compute']:.2f} | {peak[name]:.0f} |"
        )
    summarize_ok = all(
        sec[name] <= sec["compute"] and peak[name] <= peak["compute"]
        for name in ("summarize", "summarize -o")
    )
    lines += [
        "",
        f"- summarize (and summarize -o) no slower and no larger than compute: "
        f"{_verdict(summarize_ok)}",
        f"- verify <= 1.2x compute: {sec['verify'] / sec['compute']:.2f}x, "
        f"{_verdict(sec['verify'] <= 1.2 * sec['compute'])}",
        f"- plot <= summarize + 1 s: +{sec['plot'] - sec['summarize']:.2f} s, "
        f"{_verdict(sec['plot'] <= sec['summarize'] + 1.0)}",
        "",
    ]
    compared = [
        (
            f"reading jobs: {name}",
            paired_ratio(
                [r.seconds for r in runs[name]], [r.seconds for r in runs[name + AGAINST_TAG]]
            ),
        )
        for name in runs
        if name + AGAINST_TAG in runs
    ]
    return lines, compared


def small_file(rounds: int = 15) -> tuple[list[str], list[tuple[str, float]]]:
    """``grpo-adv compute`` on a 10-row CSV, end to end (target <= 0.45 s)."""
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    out = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    try:
        src = out / "ten.csv"
        src.write_text(
            "prompt_id,reward\n" + "".join(f"p{i // 4},{i % 3 / 2}\n" for i in range(10))
        )
        argv = [cli, "compute", str(src), "-o", str(out / "ten.adv.csv"), "-f"]
        mine, theirs = timed_pairs(argv, rounds)
        seconds = statistics.median(mine)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    lines = [
        f"`grpo-adv compute` on a 10-row CSV: {seconds:.3f} s median of {len(mine)} "
        f"(target <= 0.45 s: {_verdict(seconds <= 0.45)})",
        "",
    ]
    compared = [("10-row CSV", paired_ratio(mine, theirs))] if theirs else []
    return lines, compared


def help_time(rounds: int = 7) -> tuple[float, list[tuple[str, float]]]:
    """``grpo-adv --help``'s median time (and against the ``--against`` checkout's)."""
    cli = str(Path(sys.executable).with_name("grpo-adv"))
    mine, theirs = timed_pairs([cli, "--help"], rounds)
    seconds = statistics.median(mine)
    return seconds, ([("--help", paired_ratio(mine, theirs))] if theirs else [])


def timed_pairs(argv: list[str], rounds: int) -> tuple[list[float], list[float]]:
    """``argv``'s seconds over ``rounds`` runs, and, with ``--against``, the other
    checkout's in the same rounds (in :func:`in_round_order`)."""
    names = ["mine", "mine" + AGAINST_TAG] if against is not None else ["mine"]
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for index in range(even_rounds(rounds)):
        for name in in_round_order(names, index):
            seconds[name].append(run_process(argv, env_for(name)).seconds)
    return seconds["mine"], seconds.get("mine" + AGAINST_TAG, [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the numeric sets")
    parser.add_argument("--text-rows", type=int, default=1_000_000, help="rows of the text set")
    parser.add_argument(
        "--big-rows",
        type=int,
        default=200_000_000,
        help="rows of the shuffled --low-memory log (0: leave that run out)",
    )
    parser.add_argument(
        "--step-rows",
        type=int,
        default=1_000_000_000,
        help="rows of the --low-memory log in step order (0: leave that run out)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--report", type=Path, default=None, help="also write the report here")
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another checkout of grpo-adv: its grpo_cli runs every grpo-adv command too",
    )
    args = parser.parse_args()
    global against
    against = args.against.resolve() if args.against else None

    # Byte code compiled once, as an installed package has it (PYTHONDONTWRITEBYTECODE
    # would otherwise make every measured process compile grpo_cli from source).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "grpo_cli"], check=True)
    if against is not None:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(against / "grpo_cli")], check=True
        )
    orders = {
        "shuffled": "shuffled",
        "step": "shuffled within steps",
        "grouped": "grouped by prompt",
    }
    logs = {
        order: write_log(args.data / f"{order}_{args.rows}.parquet", args.rows, order=order)
        for order in orders
    }
    text = write_log(args.data / f"text_{args.text_rows}.parquet", args.text_rows, text=True)
    lines = [
        f"grpo-adv bench: {os.cpu_count()} cores, Polars {pl.__version__}, "
        f"{even_rounds(args.rounds)} rounds, medians",
        "",
    ]
    headline = []
    compared: list[tuple[str, float]] = []
    for order, words in orders.items():
        label = f"{args.rows:,} rows, {words}, numeric"
        print(f"running: {label}", file=sys.stderr, flush=True)
        result = bench_set(label, logs[order], args.rounds, text=False, pandas=order == "shuffled")
        lines += result.lines
        compared += result.against
        headline.append((words, result))
    label = f"{args.text_rows:,} rows with prompt/completion text (target: <= 1.15x floor)"
    print(f"running: {label}", file=sys.stderr, flush=True)
    text_result = bench_set(label, text, args.rounds, text=True, pandas=True)
    lines += text_result.lines
    compared += text_result.against
    print("running: reading jobs, small file", file=sys.stderr, flush=True)
    for part_lines, part_compared in (reading_jobs(logs["shuffled"], args.rounds), small_file()):
        lines += part_lines
        compared += part_compared
    seconds, help_compared = help_time()
    compared += help_compared
    lines += [f"`grpo-adv --help`: {seconds:.3f} s (target < 0.3 s: {_verdict(seconds < 0.3)})", ""]
    for order, rows in (("shuffled", args.big_rows), ("step", args.step_rows)):
        if rows:
            print(f"running: --low-memory, {order}", file=sys.stderr, flush=True)
            low_lines, low_compared = lowmem_lines(rows, args.data, order)
            lines += low_lines
            compared += low_compared
    lines += [
        "### Compute on every order (targets: <= 1.5x floor, >= 1.5x faster than DuckDB)",
        "",
        "| order | grpo-adv / floor | grpo-adv / DuckDB | DuckDB / grpo-adv |",
        "|---|---|---|---|",
    ]
    for words, result in headline:
        speedup = result.duckdb_speedup or float("nan")
        lines.append(
            f"| {words} | {result.x_floor:.2f} ({_verdict(result.x_floor <= 1.5)}) | "
            f"{1 / speedup:.2f} | {speedup:.2f} ({_verdict(speedup >= 1.5)}) |"
        )
    if against is not None:
        lines += [
            "",
            f"### This checkout against {against} (time / its time, same rounds; each "
            "pair of rounds runs either checkout first once)",
            "",
        ]
        lines += ["| row | ratio |", "|---|---|"]
        lines += [
            f"| {row} | {ratio:.3f}{'' if ratio <= 1.05 else ' (over 1.05)'} |"
            for row, ratio in compared
        ]
        worst = max(ratio for _, ratio in compared)
        lines += [
            "",
            f"- worst ratio {worst:.3f} (no regression beyond 5%: {_verdict(worst <= 1.05)})",
        ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(report)


LOWMEM_TARGETS: Final = {"shuffled": 2.0, "step": 1.5}  # times the streaming floor
LOWMEM_GIB: Final = 1.1


def lowmem_lines(
    rows: int, data: Path, order: str = "shuffled"
) -> tuple[list[str], list[tuple[str, float]]]:
    """``lowmem.py``'s run on the ``order`` log: --low-memory against the streaming floor,
    with its check (and the ``--against`` checkout's run, right after this one's)."""
    from lowmem import measure

    result = measure(rows, data, against=against, order=order)
    ratio = result.seconds / result.floor_seconds
    target = LOWMEM_TARGETS[order]
    compared = []
    if result.against_seconds is not None:
        compared = [
            (f"{rows:,} rows --low-memory, {order}", result.seconds / result.against_seconds)
        ]
    return [
        f"### {rows:,} rows with --low-memory, {order} (targets: <= {target:g}x the streaming "
        f"floor, <= {LOWMEM_GIB:g} GiB)",
        "",
        "| run | s | peak GiB |",
        "|---|---|---|",
        f"| streaming floor (scan -> sink; the mean of a run before and one after) | "
        f"{result.floor_seconds:.1f} | {result.floor_gib:.2f} |",
        f"| output floor (grpo-adv's output copied the same way: its advantage column too) | "
        f"{result.output_floor_seconds:.1f} | |",
        f"| grpo-adv --low-memory | {result.seconds:.1f} | {result.gib:.2f} |",
        "",
        f"- the output floor alone is {result.output_floor_seconds / result.floor_seconds:.2f}x "
        "the streaming floor: a target below it cannot be met by any computation",
        f"- {ratio:.2f}x the floor ({_verdict(ratio <= target)}), peak {result.gib:.2f} GiB "
        f"({_verdict(result.gib <= LOWMEM_GIB)}); route: {result.route}",
        f"- check on {result.groups} groups: rows and order equal: {result.same_rows}; "
        f"max |difference| {result.diff:.3g}",
        "",
    ], compared


if __name__ == "__main__":
    main()

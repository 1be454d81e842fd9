"""The Ray engine on this machine: ``grpo-adv compute --backend ray`` (an embedded local Ray
on every core) against the Polars engine, on a log in shards; and on a log too large for
one process, with the driver's memory bounded.

    python benchmarks/ray_bench.py --rows 10000000 --shards 16 --text-rows 2000000 \
        [--big-rows 200000000]

Figures: wall time, the driver's peak RSS (the ``grpo-adv`` process itself: Ray's workers
and object store are separate processes), rows per second per core, and the bytes shuffled
per row to the partitions and back (the Arrow sizes of what the tasks send, as the engine
logs them); the fixed cost of a run (the whole command on a 1,000-row log: Python, Ray's
start and stop, one task of each kind); a log with about 1.2 KB of text a row against the
same rows without the text. The 10M-row log runs ``--rounds`` rounds (4) of both engines,
and the text log as many of both logs, in alternating order, and each ratio is paired as
``make bench`` pairs its checkouts (``bench.paired_ratio``): one run of each on a shared
2-core machine moves by 0.5 s. The check: every row once, in its input's order,
advantages equal to the Polars engine's within 1e-12; for the big log, a sample of groups
recomputed in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import paired_ratio
from bench_logs import make_log, write_big_log

from grpo_cli.jobs.pipeline import annotate

# Runs the CLI and reports this process's own peak RSS (KiB) on its last stderr line: the
# kernel's VmHWM, which starts again at exec (ru_maxrss keeps the forking parent's); also
# when the CLI ends with os._exit (no atexit handlers then).
DRIVER = (
    "import atexit, logging, os, sys\n"
    "if os.environ.get('RAY_BENCH_LOG'):\n"
    "    log = logging.getLogger('grpo_cli.engines.ray')\n"
    "    log.setLevel(logging.INFO)\n"
    "    log.addHandler(logging.FileHandler(os.environ['RAY_BENCH_LOG']))\n"
    "hwm = lambda: next(l.split()[1] for l in open('/proc/self/status') if "
    "l.startswith('VmHWM'))\n"
    "report = lambda: sys.stderr.write(f'\\nMAXRSS {hwm()}\\n') and sys.stderr.flush()\n"
    "atexit.register(report)\n"
    "real_exit = os._exit\n"
    "os._exit = lambda code: (report(), real_exit(code))  # the CLI skips the teardown\n"
    "from grpo_cli.cli import main\n"
    "sys.argv = ['grpo-adv', *sys.argv[1:]]\n"
    "main()\n"
)


def run_cli(
    args: list[str], log: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Wall seconds and the driver's peak RSS in GiB of ``grpo-adv ARGS`` (the Ray engine's
    log lines appended to ``log``)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
    if log is not None:
        env["RAY_BENCH_LOG"] = str(log)
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


def shuffled_bytes(log: Path) -> tuple[float, float]:
    """Bytes a row sent to the partitions and back, from the engine's last log line."""
    line = [x for x in log.read_text().splitlines() if x.startswith("shuffled")][-1]
    sent, back = re.findall(r"\(([\d.]+) a row\)", line)
    return float(sent), float(back)


def check_parts(folder: Path, polars_out: Path, rows: int) -> float:
    """Every row once and in its input's order (``rid`` ascends through each part, the
    parts named after the shards), the advantages against the Polars engine's: the worst
    difference."""
    parts = sorted(folder.glob("*.parquet"))
    got = pl.concat([pl.read_parquet(p, columns=["rid", "advantage"]) for p in parts])
    assert got["rid"].to_list() == list(range(rows)), "every row once, in order"
    expected = pl.read_parquet(polars_out, columns=["advantage"])["advantage"]
    return float((got["advantage"] - expected).abs().max() or 0.0)  # type: ignore[arg-type]


def shards_bench(rows: int, shards: int, data: Path, cores: int, rounds: int) -> list[str]:
    """``rounds`` rounds of the Polars engine and the Ray engine (a private Ray) on the same
    shards, the Polars engine first in even rounds and second in odd ones; the ratio is
    :func:`bench.paired_ratio` of the rounds (the median over pairs of rounds of their
    geometric mean: a cost of running first or second cancels). Then the Ray engine on a
    cluster already running, as many times, against the Polars engine's median."""
    folder = data / f"shards_{rows}_{shards}"
    if not (folder / f"shard-{shards - 1:03d}.parquet").exists():
        log = make_log(rows, order="shuffled").with_row_index("rid")
        write_shards(log, folder, shards)
        del log
    paths = sorted(folder.glob("shard-*.parquet"))
    sample = [pl.read_parquet(p).to_arrow() for p in paths[:2]]
    per_row = sum(t.nbytes for t in sample) / sum(t.num_rows for t in sample)
    polars_out, ray_out = data / "polars_out.parquet", data / "ray_out"
    trace = data / "ray.log"
    trace.unlink(missing_ok=True)
    commands = {
        "polars": (["compute", *map(str, paths), "-o", str(polars_out), "-q", "-f"], None),
        "ray": (["compute", str(folder), "--backend", "ray", "-o", str(ray_out), "-q", "-f"],
                trace),
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {"polars": [], "ray": []}
    worst = 0.0
    for k in range(rounds):
        for name in ("polars", "ray") if k % 2 == 0 else ("ray", "polars"):
            args, logged = commands[name]
            runs[name].append(run_cli(args, logged))
        worst = max(worst, check_parts(ray_out, polars_out, rows))
    sent, back = shuffled_bytes(trace)
    p_times, r_times = ([t for t, _ in runs[n]] for n in ("polars", "ray"))
    p_s, r_s = statistics.median(p_times), statistics.median(r_times)
    p_gib, r_gib = (max(g for _, g in runs[n]) for n in ("polars", "ray"))
    ratio = paired_ratio(r_times, p_times)
    with started_cluster(cores) as address:
        joined = [
            run_cli(
                ["compute", str(folder), "--backend", "ray", "--ray-address", address, "-o",
                 str(ray_out), "-q", "-f"],
                env={"RAY_AUTH_MODE": "disabled"},
            )[0]
            for _ in range(rounds)
        ]  # fmt: skip
    c_s = statistics.median(joined)
    worst = max(worst, check_parts(ray_out, polars_out, rows))
    each = ", ".join(f"{r:.1f}/{p:.1f} s" for r, p in zip(r_times, p_times, strict=True))
    return [
        f"## {rows:,} shuffled rows in {shards} Parquet shards ({cores} cores), "
        f"medians of {rounds} rounds",
        "",
        "| engine | time | driver peak RSS | rows/s per core |",
        "|---|---|---|---|",
        f"| polars (one process) | {p_s:.1f} s | {p_gib:.2f} GiB | {rows / p_s / cores:,.0f} |",
        f"| ray (a private Ray started and stopped by the run) | {r_s:.1f} s | {r_gib:.2f} GiB "
        f"| {rows / r_s / cores:,.0f} |",
        f"| ray (a cluster already running: `--ray-address`) | {c_s:.1f} s | | "
        f"{rows / c_s / cores:,.0f} |",
        "",
        f"- ray / polars: {ratio:.2f}x the time with its own Ray (rounds paired; ray/polars "
        f"each round: {each}), {c_s / p_s:.2f}x on a running cluster",
        f"- bytes shuffled per row: {sent:.1f} to the partitions, {back:.1f} back (a row of "
        f"the log: {per_row:.1f} bytes)",
        f"- every row once, in its shard's order; max |ray - polars|: {worst:.1e}",
    ]


@contextlib.contextmanager
def started_cluster(cores: int) -> Iterator[str]:
    """A one-machine cluster started by ``ray start --head`` (no token), its address; stopped
    at the end."""
    import signal
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="rb-")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    ray = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen(
        [ray, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cores}",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(240):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(3)  # the raylet registers after the GCS listens
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def fixed_bench(data: Path, cores: int) -> list[str]:
    """The whole command on a 1,000-row log, three times: what every run pays."""
    folder = data / "shards_1000_2"
    if not (folder / "shard-001.parquet").exists():
        write_shards(make_log(1000, order="shuffled").with_row_index("rid"), folder, 2)
    times = sorted(
        run_cli(["compute", str(folder), "--backend", "ray", "-o", str(data / "tiny"), "-q", "-f"])[
            0
        ]
        for _ in range(3)
    )
    polars = sorted(
        run_cli(["compute", *map(str, sorted(folder.glob("*.parquet"))), "-o",
                 str(data / "tiny.parquet"), "-q", "-f"])[0]
        for _ in range(3)
    )  # fmt: skip
    return [
        f"## Fixed cost: 1,000 rows in 2 shards ({cores} cores), medians of 3",
        "",
        f"- ray: {times[1]:.1f} s (private Ray started and stopped; polars: {polars[1]:.1f} s)",
    ]


def text_bench(rows: int, shards: int, data: Path, cores: int, rounds: int) -> list[str]:
    """The same rows with and without about 1.2 KB of text (prompt, completion) a row,
    ``rounds`` rounds in alternating order, the ratio paired (see :func:`shards_bench`);
    and the Polars engine on both logs in the same rounds: what reading and writing the
    text costs an engine that moves nothing."""
    with_text = data / f"text_shards_{rows}_{shards}"
    without = data / f"notext_shards_{rows}_{shards}"
    if not (without / f"shard-{shards - 1:03d}.parquet").exists():
        log = make_log(rows, order="shuffled", text=True).with_row_index("rid")
        write_shards(log, with_text, shards)
        write_shards(log.drop("prompt", "completion"), without, shards)
        del log
    sample = pl.read_parquet(with_text / "shard-000.parquet").to_arrow()
    per_row = sample.nbytes / sample.num_rows
    trace = data / "ray_text.log"
    folders = {"without text": without, "with text": with_text}
    times: dict[str, list[float]] = {name: [] for name in folders}
    polars: dict[str, list[float]] = {name: [] for name in folders}
    moved: dict[str, tuple[float, float]] = {}
    for k in range(rounds):
        for name in folders if k % 2 == 0 else reversed(folders):
            trace.unlink(missing_ok=True)
            seconds, _ = run_cli(
                ["compute", str(folders[name]), "--backend", "ray", "-o",
                 str(data / "ray_text_out"), "-q", "-f"], trace,
            )  # fmt: skip
            times[name].append(seconds)
            moved[name] = shuffled_bytes(trace)
            shards_in = sorted(str(p) for p in folders[name].glob("*.parquet"))
            one = data / "polars_text_out.parquet"
            polars[name].append(run_cli(["compute", *shards_in, "-o", str(one), "-q", "-f"])[0])
    ratio = paired_ratio(times["with text"], times["without text"])
    polars_ratio = paired_ratio(polars["with text"], polars["without text"])
    each = ", ".join(
        f"{t:.1f}/{n:.1f} s" for t, n in zip(times["with text"], times["without text"], strict=True)
    )
    extra = {name: statistics.median(times[name]) for name in folders}
    extra_polars = {name: statistics.median(polars[name]) for name in folders}
    return [
        f"## {rows:,} rows in {shards} shards, with about {per_row:,.0f} bytes a row of text "
        f"and without ({cores} cores), medians of {rounds} rounds",
        "",
        "| log | ray time | bytes a row to the partitions | back |",
        "|---|---|---|---|",
        *[
            f"| {k} | {statistics.median(times[k]):.1f} s | {a:.1f} | {b:.1f} |"
            for k, (a, b) in moved.items()
        ],
        "",
        f"- with text / without: {ratio:.2f}x the time (rounds paired; with/without each "
        f"round: {each}); the text adds "
        f"{extra['with text'] - extra['without text']:.2f} s",
        f"- the Polars engine on the same logs: {extra_polars['without text']:.2f} s and "
        f"{extra_polars['with text']:.2f} s, {polars_ratio:.2f}x: the text adds "
        f"{extra_polars['with text'] - extra_polars['without text']:.2f} s (its read and "
        "write, which no engine skips)",
    ]


def big_bench(rows: int, data: Path, cores: int, sample: int = 500) -> list[str]:
    source = write_big_log(data / f"big_{rows}.parquet", rows)
    out = data / "ray_big_out"
    log = data / "ray_big.log"
    log.unlink(missing_ok=True)
    args = ["compute", str(source), "--backend", "ray", "-o", str(out), "-q", "-f"]
    r_s, r_gib = run_cli(args, log)
    sent, back = shuffled_bytes(log)
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
        f"- bytes shuffled per row: {sent:.1f} to the partitions, {back:.1f} back",
        f"- rows written: {count:,} (of {rows:,}); {sample} groups recomputed in memory: "
        f"max |difference| {worst:.1e}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--text-rows", type=int, default=2_000_000, help="0: skip the text log")
    parser.add_argument("--big-rows", type=int, default=0, help="0: skip the big log")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench")
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=4, help="of the 10M and text runs (even)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    lines = [*fixed_bench(args.data, cores), ""]
    lines += shards_bench(args.rows, args.shards, args.data, cores, args.rounds)
    if args.text_rows:
        lines += ["", *text_bench(args.text_rows, args.shards, args.data, cores, args.rounds)]
    if args.big_rows:
        lines += ["", *big_bench(args.big_rows, args.data, cores)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report is not None:
        args.report.write_text(text)


if __name__ == "__main__":
    main()

"""--low-memory: the partitioned path gives what the in-memory path gives, and cleans up."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.presets import merge_options
from grpo_cli.engines.partitioned import annotate_to_parquet
from grpo_cli.jobs.pipeline import annotate
from tests.conftest import ROOT, SAMPLE_FILES
from tests.test_presets import hostile_log

CASES: list[dict[str, Any]] = [
    {},
    {"estimator": "dr_grpo"},
    {"estimator": "rloo", "singleton": "verl"},
    {"estimator": "opo", "length_col": "length"},
    {"estimator": "grpo_passk", "singleton": "null"},
    {"nulls": "zero", "singleton": "raw", "clip": (-1.0, 1.0)},
    {"group_cols": ("step", "prompt_id"), "ddof": 0, "eps_mode": "var"},
    {"with_stats": True},
]


def both_ways(tmp_path: Path, log: pl.DataFrame, case: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``log`` with the options ``case`` by --low-memory (3 partitions, ranges of 7 rows) and
    in memory: the output frame, its run summary, and the in-memory annotation."""
    source = tmp_path / "log.parquet"
    log.write_parquet(source)
    options = AdvantageOptions(deterministic=True, **case)
    out = tmp_path / "out.parquet"
    run = annotate_to_parquet(source, out, options, partitions=3, chunk_rows=7)
    return pl.read_parquet(out), run, annotate(log, deterministic=True, **case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(c) or "defaults")
def test_same_result_as_in_memory(tmp_path: Path, case: dict[str, Any]) -> None:
    got, run, expected = both_ways(tmp_path, hostile_log(with_nulls=True), case)
    assert got.equals(expected.frame)
    for name in (
        "rows",
        "groups",
        "group_size_min",
        "group_size_median",
        "group_size_max",
        "zero_std_groups",
        "singleton_groups",
        "null_rewards",
        "advantage_min",
        "advantage_max",
    ):
        assert getattr(run, name) == getattr(expected.run, name), name
    assert run.reward_std == pytest.approx(expected.run.reward_std, rel=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]


@pytest.mark.parametrize(
    ("case", "rtol"),
    [
        ({}, 0.0),
        ({"estimator": "rloo", "singleton": "verl"}, 0.0),
        ({"whiten": True, "batch_col": "step"}, 1e-12),  # batch statistics merged
    ],
)
def test_same_result_when_the_log_is_read_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: dict[str, Any], rtol: float
) -> None:
    """The partition pass reading 5 rows at a time, groups spread over the shuffled log:
    each partition holds a record batch per batch read, in input order, cut into ranges of
    7 rows, and gives the in-memory advantages (bit for bit where no batch statistics are
    merged)."""
    from polars.testing import assert_frame_equal

    from grpo_cli.engines import partitioned

    monkeypatch.setattr(partitioned, "BATCH_ROWS", 5)
    log = hostile_log(with_nulls=True).sample(fraction=1.0, shuffle=True, seed=3)
    got, run, expected = both_ways(tmp_path, log, case)
    assert log.height > 40
    assert_frame_equal(got, expected.frame, check_exact=not rtol, rel_tol=rtol, abs_tol=rtol)
    assert (run.rows, run.groups) == (expected.run.rows, expected.run.groups)


# Every response-level estimator, by the columns it needs; GDPO; the batch-level presets.
ESTIMATOR_EXTRAS: dict[str, dict[str, Any]] = {
    name: {
        "length": {"length_col": "length"},
        "baseline": {"baseline_col": "format_reward"},
    }.get(next(iter(estimator.needs), ""), {})
    for name, estimator in ESTIMATORS.items()
    if estimator.unit == "response"
}
BATCH_CASES: list[tuple[str | None, dict[str, Any]]] = [
    *((None, {"estimator": name, **extra}) for name, extra in ESTIMATOR_EXTRAS.items()),
    *(
        (None, {"estimator": name, "batch_col": "step", **extra, **policy})
        for name, extra in ESTIMATOR_EXTRAS.items()
        for policy in (
            {"singleton": "verl", "eps_mode": "var", "ddof": 0},
            {"nulls": "zero", "clip": (-0.5, 0.5), "clip_stage": "shaped"},
        )
    ),
    (None, {"estimator": "reinforce_pp_baseline", "length_col": "length", "token_weighted": True}),
    (None, {"reward_cols": ("reward", "format_reward"), "aggregation": "normalize_then_sum"}),
    (
        None,
        {
            "reward_cols": ("reward", "format_reward"),
            "reward_weights": (1.0, 0.5),
            "aggregation": "normalize_then_sum",
            "batch_col": "step",
            "length_col": "length",
            "token_weighted": True,
        },
    ),
    (None, {"whiten": True, "whiten_ddof": 0, "whiten_eps": 0.0, "reward_clip": (0.0, 0.5)}),
    (
        None,
        {
            "estimator": "loo_grpo",
            "eps_mode": "positive_std",
            "whiten": True,
            "whiten_eps_mode": "std",
            "length_col": "length",
            "token_weighted": True,
            "batch_col": "step",
        },
    ),
    (
        None,
        {
            "estimator": "rloo",
            "reward_cols": ("reward", "format_reward"),
            "aggregation": "normalize_then_sum",
            "whiten": True,
            "whiten_ddof": 0,
            "whiten_eps_mode": "center",
        },
    ),
    ("trl-batch", {"batch_col": "step"}),
    ("trl-gdpo", {"reward_cols": ("reward", "format_reward"), "batch_col": "step"}),
    ("verl-gpg", {"batch_col": "step"}),
    ("verl-reinforce-pp-baseline", {"length_col": "length", "batch_col": "step"}),
    ("openrlhf-reinforce-baseline", {"length_col": "length"}),
]


def _case_id(case: tuple[str | None, dict[str, Any]]) -> str:
    preset, explicit = case
    return ",".join([preset or "", *(f"{k}={v}" for k, v in explicit.items())]).strip(",")


@pytest.mark.parametrize("case", BATCH_CASES, ids=_case_id)
def test_every_estimator_as_in_memory(
    tmp_path: Path, case: tuple[str | None, dict[str, Any]]
) -> None:
    """Batch-level estimators, GDPO and presets too: the batch statistics merged from the
    partitions' partials give the in-memory advantages (within 1e-12, nulls identical),
    on a log whose groups and steps spread over several partitions."""
    preset, explicit = case
    log = hostile_log(with_nulls=True)
    source = tmp_path / "log.parquet"
    log.write_parquet(source)
    options = AdvantageOptions(**merge_options(preset, {**explicit, "deterministic": True}))
    out = tmp_path / "out.parquet"
    run = annotate_to_parquet(source, out, options, partitions=3, chunk_rows=7)
    expected = annotate(log, preset, deterministic=True, **explicit)
    got = pl.read_parquet(out)
    assert got.columns == expected.frame.columns
    assert got.drop("advantage").equals(expected.frame.drop("advantage"))
    ours, theirs = got["advantage"], expected.frame["advantage"]
    assert ours.is_null().to_list() == theirs.is_null().to_list()
    assert theirs.drop_nulls().len() > 30
    for a, b in zip(ours.drop_nulls(), theirs.drop_nulls(), strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12)
    assert (run.rows, run.groups, run.null_rewards) == (
        expected.run.rows,
        expected.run.groups,
        expected.run.null_rewards,
    )


def test_refuses_process_supervision(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="does not support process supervision"):
        annotate_to_parquet(
            SAMPLE_FILES["parquet"],
            tmp_path / "o.parquet",
            AdvantageOptions(estimator="process", step_rewards_col="x"),
        )


@pytest.mark.usefixtures("width_80")
@pytest.mark.parametrize(
    ("output", "error"),
    [
        ("out.csv", "error: --low-memory writes Parquet (zstd-compressed inside)"),
        ("-", "error: --low-memory reads one Parquet file and writes one Parquet file"),
    ],
)
def test_the_output_is_refused_before_the_input_is_looked_at(
    runner: CliRunner, tmp_path: Path, output: str, error: str
) -> None:
    """The targets are checked once, before any input is read: a CSV output is a usage
    error (exit 2) even when the input is missing (it was exit 3, "no such file")."""
    missing = str(tmp_path / "missing.parquet")
    result = runner.invoke(app, ["compute", missing, "-o", output, "--low-memory"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == error


def test_a_parquet_file_without_rows_is_an_input_error(runner: CliRunner, tmp_path: Path) -> None:
    """A header-only Parquet file: the other engines' one-line error, exit 3, nothing
    written and no spill folder (its empty partitions made an internal error)."""
    source = tmp_path / "empty.parquet"
    pl.DataFrame({"step": [1], "prompt_id": ["a"], "reward": [0.5]}).head(0).write_parquet(source)
    out = tmp_path / "out.parquet"
    for engine in (["--low-memory"], []):
        result = runner.invoke(app, ["compute", str(source), "-o", str(out), *engine])
        assert result.exit_code == 3, result.output
        assert result.stderr.splitlines() == [
            f"error: {source} has no rows (columns: step, prompt_id, reward)",
            "hint: give a reward log with at least one row",
        ]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.parquet"]


def test_a_trl_dump_is_refused_with_the_route_that_works(runner: CliRunner, tmp_path: Path) -> None:
    """Its groups are runs of rows: refused as --backend ray refuses it, not with a hint
    to pass the --preset trl the user gave."""
    source = sorted((ROOT / "sample_data" / "trl_completions").iterdir())[0]
    out = tmp_path / "out.parquet"
    result = runner.invoke(
        app, ["compute", str(source), "--preset", "trl", "--low-memory", "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --low-memory does not support a TRL completions log (its groups are "
        "num_generations consecutive rows, which need the rows in order)\n"
        "hint: drop --low-memory: the default engine infers num_generations from the log\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("in_step_order", "route"),
    [(False, "partitioned: step 1 follows step 3"), (True, "one pass: the log is in step order")],
    ids=["partitioned", "one pass"],
)
def test_a_verl_dump_groups_by_its_uid_prefix(
    runner: CliRunner, tmp_path: Path, in_step_order: bool, route: str
) -> None:
    """A verl dump's groups are its uids without ``_session_index`` (a key the layout
    derives): the default engine's groups, advantages and repeat warning (it was an
    internal error, the derived key not found), on both routes."""
    dump = [pl.read_ndjson(p) for p in sorted((ROOT / "sample_data" / "verl_dump").iterdir())]
    log = pl.concat(dump).drop("advantage")
    source = tmp_path / "verl.parquet"
    doubled = pl.concat([log, log.head(8)])
    (doubled.sort("step", maintain_order=True) if in_step_order else doubled).write_parquet(source)
    outs = [tmp_path / "low.parquet", tmp_path / "default.parquet"]
    said = []
    for out, engine in zip(outs, (["--low-memory"], []), strict=True):
        args = ["compute", str(source), "--preset", "verl", "-o", str(out), *engine]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        said.append(result.stderr)
    assert "groups                        │ 18  (by step, uid (verl))" in said[0]
    assert f"│ route                         │ {route}" in said[0]
    assert (
        said[0].splitlines()[0]
        == said[1].splitlines()[0]
        == (
            "warning: 8 rows repeat a uid within their group (e.g. "
            "uid='6720cfef-42b4-f91e-f326-15b7f933ba25_0_0' in the group step=1, "
            "group='6720cfef-42b4-f91e-f326-15b7f933ba25'): duplicated rows count twice in the "
            "group's mean and std"
        )
    )
    low, default = (pl.read_parquet(out) for out in outs)
    assert low.drop("advantage").equals(default.drop("advantage"))
    assert (low["advantage"] - default["advantage"]).abs().max() < 1e-12  # type: ignore[operator]


def test_a_file_named_with_glob_characters_is_read_as_named(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``shard[1].parquet`` is a file's name, not a pattern (Polars' scans take a path as a
    glob by default, and found no file: an internal error): the same rows as the default
    engine."""
    source = tmp_path / "shard[1].parquet"
    source.write_bytes((ROOT / "sample_data" / "rewards.parquet").read_bytes())
    outs = [tmp_path / "low.parquet", tmp_path / "default.parquet"]
    for out, engine in zip(outs, (["--low-memory"], []), strict=True):
        result = runner.invoke(app, ["compute", str(source), "-o", str(out), "-q", *engine])
        assert result.exit_code == 0, result.output
    low, default = (pl.read_parquet(out) for out in outs)
    assert low.drop("advantage").equals(default.drop("advantage"))
    assert (low["advantage"] - default["advantage"]).abs().max() < 1e-12  # type: ignore[operator]


def test_cli_low_memory(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    out = sample_copy["parquet"].with_name("lm.parquet")
    args = [
        "compute",
        str(sample_copy["parquet"]),
        "-o",
        str(out),
        "--low-memory",
        "--deterministic",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "│ rows                          │ 570" in result.stderr
    expected = annotate(pl.read_parquet(sample_copy["parquet"]), deterministic=True).frame
    assert pl.read_parquet(out).equals(expected)
    csv = runner.invoke(
        app, ["compute", str(sample_copy["csv"]), "-o", str(out), "-f", "--low-memory"]
    )
    assert csv.exit_code == 2
    assert csv.stderr.startswith("error: --low-memory needs a parquet or arrow input;")


def _on_a_terminal(args: list[str], *, stderr_tty: bool = True) -> tuple[int, str]:
    """``grpo-adv ARGS`` with stderr on a pseudo-terminal (or a pipe) and the progress
    display's delay 0; its exit code and what it wrote on stderr, escape codes removed."""
    import pty

    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRPO_ADV_PROGRESS_DELAY": "0", "COLUMNS": "200"}
    command = [sys.executable, "-m", "grpo_cli", *args]
    if not stderr_tty:
        done = subprocess.run(command, env=env, capture_output=True, timeout=300)
        assert done.stdout == b""
        return done.returncode, done.stderr.decode()
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    shown = b""
    with contextlib.suppress(OSError):  # EIO: the command has ended
        while chunk := os.read(leader, 65536):
            shown += chunk
    os.close(leader)
    assert process.communicate(timeout=300)[0] == b""  # never on stdout
    return process.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode())


@pytest.fixture(scope="module")
def rows_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "log.parquet"
    n = 300_000
    pl.DataFrame({"prompt_id": [i % 9_000 for i in range(n)], "reward": [i % 7 for i in range(n)]})\
        .write_parquet(path)  # fmt: skip
    return path


def test_progress_of_each_pass_on_a_terminal(rows_log: Path, tmp_path: Path) -> None:
    """On a terminal, each pass shows its rows done of the footer's count, its rows per
    second and the time left; the display is removed before the summary."""
    out = tmp_path / "out.parquet"
    code, shown = _on_a_terminal(["compute", str(rows_log), "--low-memory", "-o", str(out)])
    assert code == 0, shown
    for stage in ("partitioning", "computing", "writing"):
        *_, line = (line for line in shown.splitlines() if line.startswith(stage))  # the last
        assert re.search(r"300,000/300,000 rows  [\d,]+ rows/s  0:00:00 left", line), line
    assert "rows                          │ 300,000" in shown  # the summary, as before
    assert pl.read_parquet(out).height == 300_000


@pytest.mark.parametrize("where", ["-q", "stderr not a terminal"])
def test_no_progress_quiet_or_off_a_terminal(rows_log: Path, tmp_path: Path, where: str) -> None:
    args = ["compute", str(rows_log), "--low-memory", "-o", str(tmp_path / "out.parquet")]
    if where == "-q":
        assert _on_a_terminal([*args, "-q"]) == (0, "")
    else:
        code, shown = _on_a_terminal(args, stderr_tty=False)
        assert code == 0
        assert "rows                          │ 300,000" in shown
        assert "rows/s" not in shown
        assert "partitioning" not in shown


def lying_footer(path: Path, column: str, truth: float, claim: float) -> None:
    """Make the footer of the Parquet file ``path`` say ``claim`` where the statistics of
    ``column`` say ``truth`` (a smallest or largest value): the 8 bytes of the double are
    patched in the footer only (the data pages keep the true values)."""
    import struct

    import pyarrow.parquet as pq

    data = bytearray(path.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    old, new = struct.pack("<d", truth), struct.pack("<d", claim)
    footer = bytes(data[start:-8])
    assert old in footer
    data[start:-8] = footer.replace(old, new)
    path.write_bytes(bytes(data))
    meta = pq.ParquetFile(path).metadata
    index = [meta.schema.column(i).name for i in range(meta.num_columns)].index(column)
    stats = meta.row_group(0).column(index).statistics
    assert claim in (stats.min, stats.max)  # the footer lies


class TestValueChecks:
    """--low-memory checks the keys' and rewards' values on the data, in its compute pass
    (never from the Parquet footer's statistics), with the in-memory path's messages."""

    def test_a_lying_footer_changes_nothing(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "lying.parquet"
        pl.DataFrame(
            {"prompt_id": ["a", "a", "b", "b"], "reward": [0.5, 1e200, 0.9, 0.1]}
        ).write_parquet(source, compression="zstd")
        lying_footer(source, "reward", truth=1e200, claim=0.9)
        assert pl.read_parquet(source)["reward"].max() == 1e200  # the data tells the truth
        out = tmp_path / "out.parquet"
        expected = [
            "error: 1 row(s) have a reward of magnitude 1e+140 or more (reward): their "
            "squares overflow float64",
            "hint: rescale the rewards (advantages do not depend on the scale, up to eps)",
        ]
        for extra in (["--low-memory"], []):
            result = runner.invoke(app, ["compute", str(source), "-o", str(out), *extra])
            assert result.exit_code == 3, result.stderr
            assert result.stderr.splitlines() == expected
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lying.parquet"]

    def test_counts_add_up_over_partitions(self, tmp_path: Path) -> None:
        """Problems in several partitions are counted whole, as the in-memory path does."""
        keys = [f"p{i}" for i in range(40)]
        log = pl.DataFrame(
            {
                "prompt_id": [None if i in (3, 29) else k for i, k in enumerate(keys)],
                "reward": [float("inf") if i == 7 else i / 40 for i in range(40)],
            }
        )
        source = tmp_path / "log.parquet"
        log.write_parquet(source)
        out = tmp_path / "out.parquet"
        with pytest.raises(InputError, match=r"^2 row\(s\) have a null group or batch key"):
            annotate_to_parquet(source, out, AdvantageOptions(), partitions=8, chunk_rows=5)
        no_nulls = log.with_columns(pl.col("prompt_id").fill_null("x"))
        no_nulls.write_parquet(source)
        with pytest.raises(InputError, match=r"^1 row\(s\) have an infinite reward"):
            annotate_to_parquet(source, out, AdvantageOptions(), partitions=8, chunk_rows=5)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]

    @pytest.mark.parametrize(
        ("column", "value", "message"),
        [
            ("prompt_id", None, "1 row(s) have a null group or batch key (step, prompt_id)"),
            ("reward", float("inf"), "1 row(s) have an infinite reward (reward)"),
            ("reward", 1e200, "1 row(s) have a reward of magnitude 1e+140 or more (reward)"),
        ],
    )
    @pytest.mark.parametrize("statistics", [True, False])
    def test_what_the_footer_shows_is_still_refused(
        self, tmp_path: Path, column: str, value: object, message: str, statistics: bool
    ) -> None:
        log = pl.read_parquet(SAMPLE_FILES["parquet"])
        bad = log.with_columns(
            pl.when(pl.int_range(pl.len()) == 5)
            .then(pl.lit(value))
            .otherwise(pl.col(column))
            .alias(column)
        )
        source = tmp_path / "bad.parquet"
        bad.write_parquet(source, statistics=statistics)
        out = tmp_path / "out.parquet"
        result = CliRunner().invoke(app, ["compute", str(source), "--low-memory", "-o", str(out)])
        assert result.exit_code == 3, result.stderr
        assert result.stderr.splitlines()[0].startswith(f"error: {message}")
        assert not out.exists()


# --------------------------------------------------------------------------- signals

INTERRUPTED = "error: interrupted; no output was written"


@pytest.fixture(scope="module")
def slow_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log whose --low-memory run takes a few seconds (500k rows, 62k groups)."""
    import numpy as np

    n = 500_000
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("slow") / "slow.parquet"
    pl.DataFrame(
        {"prompt_id": rng.integers(0, n // 8, n).astype(str), "reward": rng.random(n)}
    ).write_parquet(path)
    return path


def _start(source: Path, out: Path, sigint: Any = signal.SIG_DFL) -> subprocess.Popen[str]:
    """The run, with SIGINT inherited as ``sigint`` (SIG_IGN: a script's background job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "grpo_cli", "compute", str(source), "--low-memory", "-o",
         str(out), "-q"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )  # fmt: skip


def _wait_for(process: subprocess.Popen[str], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)


WORKER = b"spawn_main"  # in the command line of a worker (multiprocessing, spawned)


def _children(pid: int, command: bytes = b"") -> list[int]:
    """The child processes of ``pid`` whose command line holds ``command``: the worker
    (``spawn_main``), or also multiprocessing's resource tracker (``b""``)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    found = [int(p) for p in path.read_text().split()] if path.exists() else []
    return [p for p in found if command in _command_line(p)]


def _command_line(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _gone(pids: list[int], within_s: float = 0.0) -> bool:
    """Whether every process of ``pids`` has ended (a zombie has), within ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [p for p in pids if _command_line(p)]
        if not alive or time.monotonic() >= deadline:
            return not alive
        time.sleep(0.05)


def _spill(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".spill")]


def _partitions_written(folder: Path) -> bool:
    return any(any(s.glob("hashed.*/in/*.arrow")) for s in _spill(folder))


def _output_started(folder: Path) -> bool:
    return any(p.name.endswith(".part") and p.stat().st_size > 0 for p in folder.iterdir())


MOMENTS: dict[str, Callable[[Path], bool]] = {
    "spill folder made": lambda folder: bool(_spill(folder)),
    "partitions written": _partitions_written,
    "output being written": _output_started,
}


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="Linux /proc")
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize(
    ("sig", "inherited"),
    [
        (signal.SIGINT, signal.SIG_DFL),
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGINT, signal.SIG_IGN),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"],
)
def test_a_signal_stops_the_run_and_leaves_nothing(
    tmp_path: Path, slow_log: Path, moment: str, sig: signal.Signals, inherited: Any
) -> None:
    """A real signal at several moments of a --low-memory run: the run ends with 130 (143)
    and the one-line message, no output, no temporary, no worker left; or, when the signal
    came after the output was put in place, with 0 and the complete output. Also where
    SIGINT was inherited as ignored (a script's background job: the run went on to 0)."""
    source = tmp_path / "log.parquet"
    source.symlink_to(slow_log)
    out = tmp_path / "out.parquet"
    process = _start(source, out, inherited)
    _wait_for(process, lambda: MOMENTS[moment](tmp_path))
    workers, children = _children(process.pid, WORKER), _children(process.pid)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert _gone(workers)  # the worker is killed before the command ends
    assert _gone(children, within_s=10)  # the resource tracker, once its pipe is closed
    if process.returncode == 0:  # the signal came after the output was in place
        assert moment == "output being written"
        assert left == ["log.parquet", "out.parquet"]
        assert pl.read_parquet(out).height == 500_000
        return
    code, message = (130, INTERRUPTED) if sig == signal.SIGINT else (143, "error: terminated")
    assert process.returncode == code, stderr
    assert stderr.splitlines() == [message.split(";")[0] + "; no output was written"]
    assert left == ["log.parquet"]


def test_killing_the_command_kills_its_worker(tmp_path: Path, slow_log: Path) -> None:
    """``kill -9`` of the command: its worker dies with it (no process left to write), and
    the next run removes the tagged temporaries."""
    out = tmp_path / "out.parquet"
    process = _start(slow_log, out)
    _wait_for(process, lambda: _partitions_written(tmp_path))
    workers, children = _children(process.pid, WORKER), _children(process.pid)
    assert len(workers) == 1
    process.kill()
    process.wait(timeout=30)
    assert _gone(children, within_s=10)  # the worker and multiprocessing's resource tracker


def test_ctrl_c_while_starting_up_prints_one_line(tmp_path: Path) -> None:
    """A Ctrl-C while the command line loads (here: as typer is imported): the one-line
    message and exit 130, no traceback."""
    script = (
        "import builtins\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'typer':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "from grpo_cli.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "compute", "x.parquet"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 130
    assert done.stderr == INTERRUPTED + "\n"
    assert list(tmp_path.iterdir()) == []


def test_a_spill_folder_is_removed_at_once_and_watched_only_after_an_error(
    tmp_path: Path,
) -> None:
    """A run's spill folder goes in one removal (the 50 ms wait is only for a run that
    failed: 20 folders took at least 1 s); after an error, a folder that Polars' sink
    thread makes again once it is gone is removed again."""
    import threading

    from grpo_cli.io.temporaries import make_spill_folder, remove_spill_folder

    folders = [make_spill_folder(tmp_path) for _ in range(20)]
    for folder in folders:
        (folder / "part.ipc").write_bytes(b"spilled")
    started = time.monotonic()
    for folder in folders:
        remove_spill_folder(folder)
    assert time.monotonic() - started < 0.5
    assert list(tmp_path.iterdir()) == []
    failed = make_spill_folder(tmp_path)

    def late_sink() -> None:
        while failed.exists():
            time.sleep(0.001)
        (failed / "in").mkdir(parents=True)  # the sink's last file, after the removal

    sink = threading.Thread(target=late_sink)
    sink.start()
    remove_spill_folder(failed, after_error=True)
    sink.join()
    assert list(tmp_path.iterdir()) == []


class TestStepPass:
    """A log in step order is computed in one pass (grpo_cli.engines.steps): the same
    numbers as in memory, steps cut across read batches; anything else falls back to the
    partitioned passes from the start of the file, and the run says which ran and why."""

    WITHIN_STEPS: Final[dict[str, Any]] = {"group_cols": ("step", "prompt_id")}

    @staticmethod
    def by_step(seed: int = 7) -> pl.DataFrame:
        """The hostile log with its rows in step order (input order kept within a step) and
        more steps, so that read batches of 7 rows cut steps and groups."""
        log = hostile_log(seed=seed, with_nulls=True)
        later = log.with_columns(pl.col("step") + 2)
        return pl.concat([log, later]).sort("step", maintain_order=True)

    def run(
        self, tmp_path: Path, log: pl.DataFrame, options: AdvantageOptions
    ) -> tuple[pl.DataFrame, Any]:
        source = tmp_path / "log.parquet"
        log.write_parquet(source)
        out = tmp_path / "out.parquet"
        run = annotate_to_parquet(source, out, options, partitions=3, chunk_rows=7)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]
        return pl.read_parquet(out), run

    @pytest.mark.parametrize(
        "case", [*CASES[:6], CASES[7]], ids=lambda c: ",".join(c) or "defaults"
    )
    def test_same_result_as_in_memory(self, tmp_path: Path, case: dict[str, Any]) -> None:
        log = self.by_step()
        options = AdvantageOptions(deterministic=True, **{**self.WITHIN_STEPS, **case})
        got, run = self.run(tmp_path, log, options)
        expected = annotate(log, deterministic=True, **{**self.WITHIN_STEPS, **case})
        assert run.route == "one pass: the log is in step order"
        assert got.equals(expected.frame)
        assert (run.rows, run.groups, run.singleton_groups, run.null_rewards) == (
            expected.run.rows,
            expected.run.groups,
            expected.run.singleton_groups,
            expected.run.null_rewards,
        )
        assert run.reward_std == pytest.approx(expected.run.reward_std, rel=1e-12)

    @pytest.mark.parametrize(
        "case",
        [
            {"estimator": "rloo", "batch_col": "step", "whiten": True},
            {"estimator": "reinforce_pp_baseline", "batch_col": "step"},
        ],
        ids=lambda c: c["estimator"],
    )
    def test_a_batch_that_is_the_step(self, tmp_path: Path, case: dict[str, Any]) -> None:
        log = self.by_step()
        got, run = self.run(tmp_path, log, AdvantageOptions(**self.WITHIN_STEPS, **case))
        assert run.route == "one pass: the log is in step order"
        expected = annotate(log, deterministic=True, **self.WITHIN_STEPS, **case).frame
        assert got.drop("advantage").equals(expected.drop("advantage"))
        ours, theirs = got["advantage"].to_list(), expected["advantage"].to_list()
        assert [a is None for a in ours] == [b is None for b in theirs]
        assert [a for a in ours if a is not None] == pytest.approx(
            [b for b in theirs if b is not None], rel=1e-12, abs=1e-12
        )

    def test_a_step_going_back_falls_back_to_the_partitioned_passes(self, tmp_path: Path) -> None:
        """The last rows go back to step 1 after several batches were written: nothing of
        the first pass is kept, every row comes once, in input order."""
        log = self.by_step()
        back = log.head(3).with_columns(prompt_id=pl.lit("late"))
        log = pl.concat([log, back])
        got, run = self.run(
            tmp_path, log, AdvantageOptions(deterministic=True, **self.WITHIN_STEPS)
        )
        row = log.height - 3
        assert run.route == (
            f"partitioned: step 1 follows step 4 at row {row}: the log is not step-ordered"
        )
        assert got.equals(annotate(log, deterministic=True, **self.WITHIN_STEPS).frame)

    @pytest.mark.parametrize(
        ("case", "reason"),
        [
            ({"group_cols": ("prompt_id",)}, "groups are not formed within each step"),
            (
                {"estimator": "reinforce_pp_baseline", **WITHIN_STEPS},
                "the formula's batch spans several values of step",
            ),
        ],
        ids=["groups across steps", "batch across steps"],
    )
    def test_plans_it_cannot_compute_take_the_partitioned_passes(
        self, tmp_path: Path, case: dict[str, Any], reason: str
    ) -> None:
        log = self.by_step()
        got, run = self.run(tmp_path, log, AdvantageOptions(deterministic=True, **case))
        assert run.route == f"partitioned: {reason}"
        expected = annotate(log, deterministic=True, **case).frame
        assert got.drop("advantage").equals(expected.drop("advantage"))
        nan = float("nan")
        assert got["advantage"].fill_null(nan).to_list() == pytest.approx(
            expected["advantage"].fill_null(nan).to_list(), rel=1e-12, abs=1e-12, nan_ok=True
        )

    def test_a_step_larger_than_its_budget_takes_the_partitioned_passes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from grpo_cli.engines import steps

        monkeypatch.setattr(steps, "MAX_STEP_BYTES", 64)
        log = self.by_step()
        got, run = self.run(
            tmp_path, log, AdvantageOptions(deterministic=True, **self.WITHIN_STEPS)
        )
        assert run.route is not None
        assert run.route.startswith("partitioned: step ")
        assert "alone holds more than the 6.10352e-05 MiB a step may hold" in run.route
        assert got.equals(annotate(log, deterministic=True, **self.WITHIN_STEPS).frame)

    def test_refused_values_leave_no_output(self, runner: CliRunner, tmp_path: Path) -> None:
        """A null key in the second step: refused with the in-memory message (exit 3),
        after the first step was written, and nothing is left."""
        log = self.by_step().with_columns(
            prompt_id=pl.when(pl.int_range(pl.len()) == 40).then(None).otherwise("prompt_id")
        )
        source = tmp_path / "log.parquet"
        log.write_parquet(source)
        out = tmp_path / "out.parquet"
        args = ["compute", str(source), "-o", str(out)]
        result = runner.invoke(app, [*args, "--low-memory"])
        assert result.exit_code == 3, result.stderr
        assert result.stderr.startswith("error: 1 row(s) have a null group or batch key")
        assert result.stderr == runner.invoke(app, args).stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]

    def test_the_summary_names_the_route(self, runner: CliRunner, tmp_path: Path) -> None:
        """The sample log is in step order; with repeated rows, the repeat warning still
        comes from the one pass."""
        sample = pl.read_parquet(SAMPLE_FILES["parquet"])
        source = tmp_path / "twice.parquet"
        pl.concat([sample, sample.head(5)]).sort("step", maintain_order=True).write_parquet(source)
        out = tmp_path / "out.parquet"
        args = ["compute", str(source), "-o", str(out), "--low-memory"]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.stderr
        assert "│ route " in result.stderr
        assert "one pass: the log is in step order" in result.stderr
        assert "warning: 5 rows repeat a completion_id within their group" in result.stderr
        across = runner.invoke(app, [*args, "-f", "-g", "prompt_id"], env={"COLUMNS": "200"})
        assert across.exit_code == 0, across.stderr
        assert "partitioned: groups are not formed within each step" in across.stderr


@pytest.mark.parametrize("command", ["summarize", "verify"])
def test_report_commands_show_the_progress_of_their_pieces(tmp_path: Path, command: str) -> None:
    """A report command on a log over PIECE_ROWS rows shows, on a terminal, the spilling
    pass and the pieces read, each with its rows, rate and time left; nothing with -q."""
    from grpo_cli import compute_advantages
    from grpo_cli.report.pieces import PIECE_ROWS

    n = PIECE_ROWS + 100_000
    ids = pl.int_range(n, eager=True)
    raw = pl.DataFrame({"step": ids // 40_000, "prompt_id": ids % 5_000, "reward": ids % 7})
    log = tmp_path / "log.parquet"
    compute_advantages(raw.with_columns(pl.col("reward").cast(pl.Float64))).write_parquet(log)
    args = [command, str(log), *(["-e", "grpo"] if command == "verify" else [])]  # not auto
    code, shown = _on_a_terminal(args)
    assert code == 0, shown
    for stage in ("spilling the log in pieces", "reading the pieces"):
        *_, line = (line for line in shown.splitlines() if line.startswith(stage))  # the last
        assert re.search(rf"{n:,}/{n:,} rows  [\d,]+ rows/s  0:00:00 left", line), line
    assert _on_a_terminal([*args, "-q"]) == (0, "")

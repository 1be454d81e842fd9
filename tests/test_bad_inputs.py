"""Hardening: the bad-input corpus (exact messages and exit codes, no output left behind),
a real SIGTERM in the middle of a write, and a fuzz test of the readers."""

from __future__ import annotations

import contextlib
import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import GrpoAdvError
from grpo_cli.io.read import read_rewards
from tests.bad_inputs.corpus import (
    GOOD_JSONL,
    HINT_DAMAGED,
    HINT_FIRST_LINE,
    HINT_PARQUET,
    HINT_TEXT,
    JSONL_ADVANTAGES,
    Case,
    cases,
    kind_cases,
)
from tests.conftest import ROOT, SAMPLE_FILES, import_or_skip

CASES = cases()


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


@pytest.mark.parametrize("case", [*CASES, *kind_cases()], ids=lambda case: case.name)
def test_corpus_case(
    case: Case, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # messages name the file as given
    (tmp_path / case.name).write_bytes(case.data)
    out = tmp_path / "out.parquet"
    result = runner.invoke(app, ["compute", case.name, "-o", "out.parquet", "-q", *case.args])
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.exit_code == case.exit_code, result.stderr
    if case.exit_code:
        assert result.stderr.splitlines() == list(case.stderr)
        assert _leftovers(tmp_path, {case.name}) == []  # no output, no temporary file
        return
    assert case.advantages is not None
    got = pl.read_parquet(out)["advantage"].to_list()
    assert len(got) == len(case.advantages)
    for value, expected in zip(got, case.advantages, strict=True):
        assert value == (
            pytest.approx(expected, rel=1e-12, abs=1e-15) if expected is not None else None
        )


def test_corpus_covers_every_kind_of_bad_input() -> None:
    names = {c.name.split(".")[0] for c in CASES}
    for needed in (
        "empty", "header_only", "no_group_column", "no_reward_column", "text_reward",
        "bool_reward", "nested_reward", "mixed_int_float", "numbers_as_strings", "infinite",
        "nan", "null_key", "duplicate_columns", "utf8_bom", "crlf", "quoted_newline",
        "semicolons", "truncated_last_line", "blank_line", "non_object_line", "truncated",
        "binary", "gzip", "zstd",
    ):  # fmt: skip
        assert needed in names, needed


class TestFilesystem:
    def test_missing_file(self, runner: CliRunner, tmp_path: Path) -> None:
        result = runner.invoke(app, ["compute", str(tmp_path / "nope.csv")])
        assert result.exit_code == 3
        assert result.stderr.splitlines() == [
            f"error: no such file: {tmp_path / 'nope.csv'}",
            "hint: check the path, or give - to read standard input",
        ]

    def test_folder_without_logs(self, runner: CliRunner, tmp_path: Path) -> None:
        folder = tmp_path / "dumps"
        folder.mkdir()
        result = runner.invoke(app, ["compute", str(folder), "-o", str(tmp_path / "o.csv")])
        assert result.exit_code == 3
        assert result.stderr.splitlines()[0] == (
            f"error: folder {folder} holds no .parquet, .pq, .csv, .jsonl, .ndjson, .arrow, "
            ".feather or .ipc file"
        )
        assert _leftovers(tmp_path, {"dumps"}) == []

    def test_no_read_permission(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        source = tmp_path / "r.csv"
        source.write_bytes(b"prompt_id,reward\np,1\n")
        if os.geteuid() != 0:
            source.chmod(0)
        else:  # root reads anything: make the read fail as it would for a user
            real = Path.read_bytes

            def denied(self: Path) -> bytes:
                if self == source:
                    raise PermissionError(13, "Permission denied")
                return real(self)

            monkeypatch.setattr(Path, "read_bytes", denied)
        result = runner.invoke(app, ["compute", str(source), "-o", str(tmp_path / "o.csv")])
        assert result.exit_code == 3
        assert result.stderr.splitlines() == [
            f"error: permission denied reading {source}",
            "hint: check the file's permissions",
        ]

    def test_gzip_on_stdin(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["compute", "-", "-q"], input=gzip.compress(GOOD_JSONL))
        assert result.exit_code == 0, result.stderr
        assert result.stdout.count("advantage") == 3  # JSONL out, one object per row

    def test_compressed_input_gets_a_compressed_default_output(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        source = tmp_path / "r.jsonl.gz"
        source.write_bytes(gzip.compress(GOOD_JSONL))
        result = runner.invoke(app, ["compute", str(source), "-q"])
        assert result.exit_code == 0, result.stderr
        written = (tmp_path / "r.adv.jsonl.gz").read_bytes()
        assert written[:2] == b"\x1f\x8b"  # gzip's magic bytes
        plain = runner.invoke(app, ["compute", "-", "-q"], input=GOOD_JSONL)
        assert gzip.decompress(written).decode() == plain.stdout
        advantages = read_rewards(tmp_path / "r.adv.jsonl.gz").frame["advantage"]
        assert advantages.to_list() == pytest.approx(JSONL_ADVANTAGES, rel=1e-12)

    def test_markup_in_messages_is_printed_as_is(self, runner: CliRunner, tmp_path: Path) -> None:
        result = runner.invoke(
            app, ["compute", str(SAMPLE_FILES["csv"]), "-r", "[bold]x", "-o", "-"]
        )
        assert result.exit_code == 3
        assert "reward column '[bold]x' not found" in result.stderr


def _slow_writer_script() -> str:
    """grpo-adv whose writer writes some bytes, signals the test, then stalls."""
    return (
        "import sys, time, pathlib\n"
        "import grpo_cli.io.write as io\n"
        "marker = pathlib.Path(sys.argv[1])\n"
        "def stalled(frame, sink, fmt):\n"
        "    sink.write(b'PAR1 partial')\n"
        "    sink.flush()\n"
        "    marker.touch()\n"
        "    time.sleep(60)\n"
        "io.write_frame = stalled\n"
        "sys.argv = ['grpo-adv', *sys.argv[2:]]\n"
        "from grpo_cli.cli import main\n"
        "main()\n"
    )


@pytest.mark.slow
def test_sigterm_mid_write_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "rewards.parquet"
    source.write_bytes(SAMPLE_FILES["parquet"].read_bytes())
    out = tmp_path / "out.parquet"
    out.write_bytes(b"the user's earlier output")
    marker = tmp_path / "writing"
    process = subprocess.Popen(
        [sys.executable, "-c", _slow_writer_script(), str(marker), "compute", str(source),
         "-o", str(out), "--force", "-q"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    partial = [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]
    assert len(partial) == 1  # mid-write: the temporary file exists
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143
    assert stderr == "error: terminated; no output was written\n"
    assert out.read_bytes() == b"the user's earlier output"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out.parquet",
        "rewards.parquet",
        "writing",
    ]


def _handlers_installed(pid: int) -> bool:
    """Whether grpo-adv's SIGTERM handler is in place in process ``pid`` (Linux: its
    caught-signals mask in /proc): its first lines have run."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")
def test_a_signal_at_any_moment_gives_its_one_line(tmp_path: Path) -> None:
    """SIGINT or SIGTERM 0 to 350 ms after grpo-adv's first lines ran (loading, parsing,
    reading, computing, writing, exiting), also with SIGINT inherited as ignored (a
    script's background job): exit 130 (143) with the one line and no output, or, the
    run complete before the signal, exit 0 with the whole output."""
    rows = pl.read_parquet(SAMPLE_FILES["parquet"]).height
    runs = 20
    for i in range(runs):
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        ignored = i % 4 >= 2
        out = tmp_path / f"out{i}.parquet"
        process = subprocess.Popen(
            [sys.executable, "-m", "grpo_cli", "compute", str(SAMPLE_FILES["parquet"]),
             "-o", str(out), "-q"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not _handlers_installed(process.pid):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(0.35 * i / (runs - 1))  # the moment, not a wait
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
        word = "interrupted" if sig == signal.SIGINT else "terminated"
        moment = f"run {i}: {sig.name}{' (SIGINT ignored)' if ignored else ''}"
        if process.returncode == 0:  # complete before the signal
            assert stderr in (
                "",
                f"warning: {word} after the output was written (it is complete)\n",
            ), moment
            assert pl.read_parquet(out).height == rows, moment
            continue
        assert (process.returncode, stderr) == (
            130 if sig == signal.SIGINT else 143,
            f"error: {word}; no output was written\n",
        ), moment
        assert not out.exists(), moment
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("out")] == []


_SIGNAL_AFTER_THE_LOAD = """
import os, signal, sys
from grpo_cli.io.interrupts import SIGNALS
signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # what grpo_cli.__main__ does first
import grpo_cli.cli  # loaded: the handlers it found (the default ones) are back
os.kill(os.getpid(), signal.SIG{name})  # the moment before the app installs its own
from grpo_cli.cli.app import main
sys.argv = ["grpo-adv", "compute", sys.argv[1], "-o", sys.argv[2], "-q"]
main()
"""


@pytest.mark.parametrize("name", ["TERM", "INT"])
def test_a_signal_between_the_load_and_the_handlers_gives_its_line(
    tmp_path: Path, name: str
) -> None:
    """The package puts back the handlers it found once the app has loaded, a moment
    before the app installs its own: a signal then waits, blocked by the launcher, and
    ends the run with its line (it used to meet the default action: SIGTERM killed the
    process without a word)."""
    out = tmp_path / "out.parquet"
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_AFTER_THE_LOAD.replace("{name}", name),
         str(SAMPLE_FILES["parquet"]), str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    word = "terminated" if name == "TERM" else "interrupted"
    assert (done.returncode, done.stderr) == (
        143 if name == "TERM" else 130,
        f"error: {word}; no output was written\n",
    )
    assert not out.exists()


def test_the_console_script_and_python_m_run_the_launcher() -> None:
    """Both ways in go through :mod:`grpo_cli.__main__` (its blocked signals)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["grpo-adv"] == "grpo_cli.__main__:main"
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "--version"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("grpo-adv ")


_SIGNAL_IN_A_POLARS_CALLBACK = """
import os, signal, sys, time
import polars as pl
from grpo_cli.cli import signals
from grpo_cli.core.errors import Terminated

signal.signal(signal.SIGTERM, signals.on_signal)
signals.command_started()


def double(batch):  # Polars' Rust engine calls it: SIGTERM arrives while it runs
    os.kill(os.getpid(), signal.SIGTERM)
    start = time.monotonic()
    while time.monotonic() - start < 0.05:
        pass
    return batch * 2


try:
    frame = pl.DataFrame({"a": [1, 2]}).lazy().select(pl.col("a").map_batches(double))
    print(frame.collect()["a"].to_list())
    time.sleep(5)
    print("the signal was lost")
except Terminated:
    print("terminated in our code", signals.raised_signal())
"""


def test_a_signal_inside_a_polars_callback_unwinds_in_our_code() -> None:
    """A signal that meets Python code run by Polars' engine (a scan's callback: CI once
    met it in Parquet's cast options) is delivered again once Polars returns, so the run
    unwinds in its own code: raised inside the callback, it became a Rust panic with its
    backtrace on stderr and a "cannot read ... as parquet" error."""
    process = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_A_POLARS_CALLBACK],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert (process.stdout, process.stderr) == (
        f"[2, 4]\nterminated in our code {int(signal.SIGTERM)}\n",
        "",
    )


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.text(alphabet='prompt_id,reward\n"{}:[]0123456789.-e aNnulltrue', max_size=200).map(
            str.encode
        ),
    ),
    fmt=st.sampled_from([None, "csv", "jsonl", "json", "parquet"]),
)
@example(data=b'"\n\x00', fmt=None)  # once found by chance: a two-line error
def test_fuzzed_bytes_give_a_clean_error_or_a_log(data: bytes, fmt: str | None) -> None:
    """Random bytes: the reader raises a GrpoAdvError or returns a frame; the whole command
    exits 0 or with a documented code, never with a traceback."""
    import io as stdio

    try:
        log = read_rewards(stdio.BytesIO(data), fmt)
    except GrpoAdvError as exc:
        assert exc.message and "\n" not in exc.message
    else:
        assert log.frame.height > 0
    result = CliRunner().invoke(
        app, ["compute", "-", "-q", *(["--format", fmt] if fmt else []), "-o", "-"], input=data
    )
    assert result.exit_code in (0, 2, 3), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_documented_tables_match_the_code() -> None:
    """docs/bad_inputs.md lists every corpus case with its exact line and exit code."""
    corpus_table = (ROOT / "docs" / "bad_inputs.md").read_text()
    for case in CASES:
        result = (
            f"exit {case.exit_code}: `{case.stderr[0].removeprefix('error: ')}`"
            if case.exit_code
            else "works"
        )
        assert f"| `{case.name}` | {result} |" in corpus_table, case.name


def test_stdout_carries_only_data(runner: CliRunner) -> None:
    """Warnings and the summary go to stderr; stdout parses as the data, whole."""
    result = runner.invoke(app, ["compute", str(SAMPLE_FILES["csv"]), "-o", "-"])
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: 1 null or NaN reward(s)")
    assert "grpo-adv compute" in result.stderr
    import io

    data = pl.read_csv(io.StringIO(result.stdout))
    assert data.height == 570 and data.columns[-1] == "advantage"


@pytest.mark.slow
def test_truncated_parquet_with_low_memory(runner: CliRunner, tmp_path: Path) -> None:
    data = SAMPLE_FILES["parquet"].read_bytes()
    source = tmp_path / "cut.parquet"
    source.write_bytes(data[: len(data) // 2])
    result = runner.invoke(
        app, ["compute", str(source), "--low-memory", "-o", str(tmp_path / "o.parquet")]
    )
    assert result.exit_code == 3
    assert result.stderr.splitlines()[0] == (
        f"error: {source} is not a complete Parquet file (no PAR1 footer: truncated?)"
    )
    assert _leftovers(tmp_path, {"cut.parquet"}) == []


MEMORY_LIMIT = 2 << 30  # the address space a run may take: /dev/zero grew past 6 GiB in 6 s
ENGINE_ARGS = {
    "default": ("-o", "out.parquet"),
    "low-memory": ("--low-memory", "-o", "out.parquet"),
    "ray": ("--backend", "ray", "-o", "out"),
}


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run_limited(
    folder: Path, command: str, stdin: Any = subprocess.DEVNULL, timeout: float = 60
) -> tuple[int, list[str]]:
    """``command`` (a bash line in ``folder``, ``grpo-adv`` being this checkout's CLI) in
    at most MEMORY_LIMIT of address space and ``timeout`` seconds: its exit code and
    stderr lines."""
    cli = f"{sys.executable} -m grpo_cli"
    done = subprocess.run(
        ["bash", "-c", command.replace("grpo-adv", cli)],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
        check=False,
    )
    return done.returncode, done.stderr.splitlines()


NOT_A_FILE_HINT = "hint: give a reward log file, or pipe one in: cat log.jsonl | grpo-adv compute -"


class TestNotALog:
    """Inputs that are not a reward log are refused in bounded memory and time (exit 3,
    one error line and its hint), whatever the engine: a device, a stream of binary or of
    one endless line; nothing is written."""

    @pytest.mark.slow
    @pytest.mark.parametrize("engine", ENGINE_ARGS)
    def test_a_device_is_refused_at_once(self, tmp_path: Path, engine: str) -> None:
        args = " ".join(ENGINE_ARGS[engine])
        code, stderr = _run_limited(tmp_path, f"grpo-adv compute /dev/zero {args}")
        assert code == 3
        assert stderr == [
            "error: /dev/zero is a character device, not a file or a pipe",
            NOT_A_FILE_HINT,
        ]
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.slow
    def test_standard_input_from_a_device(self, tmp_path: Path) -> None:
        with Path("/dev/zero").open("rb") as zeros:
            code, stderr = _run_limited(tmp_path, "grpo-adv compute - -o out.csv", stdin=zeros)
        assert code == 3
        assert stderr == [
            "error: <stdin> is a character device, not a file or a pipe",
            NOT_A_FILE_HINT,
        ]

    @pytest.mark.slow
    @pytest.mark.parametrize(
        ("stream", "args", "error", "hint"),
        [
            (
                "cat /dev/zero",
                "",
                "<stdin> is not a text log (a NUL byte at offset 0)",
                HINT_TEXT,
            ),
            (
                "cat /dev/zero",
                "--format parquet",
                "cannot read <stdin> as parquet: it does not start with PAR1",
                "hint: the file may be truncated or not Parquet; pass --format to read it as "
                "another",
            ),
            (
                "tr '\\0' a < /dev/zero",
                "",
                "<stdin> is not a reward log: the header line of a CSV log is longer than 1 MiB",
                HINT_FIRST_LINE,
            ),
            (
                "(printf '{'; tr '\\0' a < /dev/zero)",
                "",
                "<stdin> is not a reward log: the first line of a JSONL log is longer than 64 MiB",
                HINT_FIRST_LINE,
            ),
        ],
        ids=["zeros", "zeros-as-parquet", "endless-header", "endless-json-line"],
    )
    def test_an_endless_pipe_is_refused_at_its_first_bytes(
        self, tmp_path: Path, stream: str, args: str, error: str, hint: str
    ) -> None:
        code, stderr = _run_limited(tmp_path, f"{stream} | grpo-adv compute - {args} -o out.csv")
        assert code == 3
        assert stderr == [f"error: {error}", hint]
        assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def _fifo_serving(path: Path, data: bytes) -> Iterator[None]:
    """A FIFO at ``path`` whose writer (a thread) writes ``data`` once a reader opens it;
    on exit the writer is released even if nothing read it."""
    os.mkfifo(path)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), path.open("wb") as fifo:
            fifo.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        if writer.is_alive():  # never opened: open it to let the writer through
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            writer.join(timeout=10)
            os.close(fd)
        writer.join(timeout=10)
        assert not writer.is_alive()


class TestFifo:
    """A FIFO (``mkfifo``, ``<(cmd)``) is read once, as standard input is: by the default
    engine; the engines that open their input again refuse it at once with the route that
    works."""

    @pytest.mark.slow
    @pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
    def test_the_default_engine_reads_a_fifo(self, tmp_path: Path, fmt: str) -> None:
        source = SAMPLE_FILES[fmt]
        with _fifo_serving(tmp_path / f"in.{fmt}", source.read_bytes()):
            code, stderr = _run_limited(tmp_path, f"grpo-adv compute in.{fmt} -o out.csv -q")
        assert code == 0, stderr
        code, stderr = _run_limited(tmp_path, f"grpo-adv compute {source} -o file.csv -q")
        assert code == 0, stderr
        expected = pl.read_csv(tmp_path / "file.csv")
        assert expected.height == 570
        got = pl.read_csv(tmp_path / "out.csv")  # the last digit of a sum may differ
        assert_frame_equal(got, expected, check_exact=False, rel_tol=1e-14, abs_tol=1e-14)

    @pytest.mark.slow
    @pytest.mark.parametrize(
        ("engine", "fmt"),
        [("low-memory", "parquet"), ("ray", "parquet"), ("ray", "jsonl")],
    )
    def test_engines_that_open_an_input_again_refuse_a_fifo(
        self, tmp_path: Path, engine: str, fmt: str
    ) -> None:
        named = "--low-memory" if engine == "low-memory" else "--backend ray"
        args = " ".join(ENGINE_ARGS[engine])
        with _fifo_serving(tmp_path / f"in.{fmt}", SAMPLE_FILES[fmt].read_bytes()):
            code, stderr = _run_limited(tmp_path, f"grpo-adv compute in.{fmt} {args}", timeout=30)
        assert code == 2
        assert stderr == [
            f"error: {named} reads a file it can open again and seek; in.{fmt} is a pipe",
            f"hint: drop {named}: the default engine reads a pipe (or - for standard input)",
        ]
        assert [p.name for p in tmp_path.iterdir()] == [f"in.{fmt}"]


def _cut_where_polars_panics(parquet: bytes) -> bytes:
    """The sample log cut at 22% of its data, its footer re-appended: Polars' reader
    panics on it (Rust's panic text on stderr, from the reader's threads)."""
    footer = int.from_bytes(parquet[-8:-4], "little") + 8
    return parquet[: (len(parquet) - footer) * 22 // 100] + parquet[-footer:]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINE_ARGS)
def test_a_file_polars_panics_on_gives_only_our_lines(tmp_path: Path, engine: str) -> None:
    """Nothing but grpo-adv's own two lines on stderr: the footer is checked before Polars
    reads the file (the Ray engine reads a folder: the damaged file is its second)."""
    if engine == "ray":
        import_or_skip("ray")
    folder = tmp_path / "in"
    folder.mkdir()
    data = SAMPLE_FILES["parquet"].read_bytes()
    (folder / "a.parquet").write_bytes(data)
    bad = folder / "b.parquet"
    bad.write_bytes(_cut_where_polars_panics(data))
    given = "in" if engine == "ray" else "in/b.parquet"
    code, stderr = _run_limited(
        tmp_path, f"grpo-adv compute {given} {' '.join(ENGINE_ARGS[engine])}"
    )
    assert code == 3
    cause = (
        "row group 0, column task: its data lies outside the file (bytes 1375..1540 of 2928); "
        "the file is truncated or corrupt"
    )
    assert stderr == [
        f"error: cannot read in/b.parquet as parquet: {cause}",
        HINT_DAMAGED if engine == "low-memory" else HINT_PARQUET,
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["in"]

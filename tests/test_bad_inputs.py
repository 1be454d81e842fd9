"""Hardening: the bad-input corpus (exact messages and exit codes, no output left behind),
a real SIGTERM in the middle of a write, and a fuzz test of the readers."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import GrpoAdvError
from grpo_cli.io.read import read_rewards
from tests.bad_inputs.corpus import GOOD_JSONL, Case, cases
from tests.conftest import ROOT, SAMPLE_FILES

CASES = cases()


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
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


def test_corpus_covers_the_issue_list() -> None:
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
            f"error: folder {folder} holds no .parquet, .csv, .jsonl or .ndjson file"
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

    def test_compressed_input_gets_a_plain_default_output(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        source = tmp_path / "r.jsonl.gz"
        source.write_bytes(gzip.compress(GOOD_JSONL))
        result = runner.invoke(app, ["compute", str(source), "-q"])
        assert result.exit_code == 0, result.stderr
        assert pl.read_ndjson(tmp_path / "r.adv.jsonl").height == 3

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


def test_readme_tables_match_the_code() -> None:
    import grpo_cli.core.errors as errors

    readme = (ROOT / "README.md").read_text()
    for case in CASES:
        result = (
            f"exit {case.exit_code}: `{case.stderr[0].removeprefix('error: ')}`"
            if case.exit_code
            else "works"
        )
        assert f"| `{case.name}` | {result} |" in readme, case.name
    codes = {
        value
        for name, value in vars(errors).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    documented = {
        int(line.split("|")[1])
        for line in readme.splitlines()
        if line[:2] == "| " and line.split("|")[1].strip().isdigit()
    }
    assert documented == codes
    for code in codes:
        assert f"\n{code} " in (errors.__doc__ or "") or f"{code}   " in (errors.__doc__ or "")


def test_stdout_carries_only_data(runner: CliRunner) -> None:
    """Warnings and the summary go to stderr; stdout parses as the data, whole."""
    result = runner.invoke(app, ["compute", str(SAMPLE_FILES["csv"]), "-o", "-"])
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: 1 null or NaN reward(s)")
    assert "grpo-adv compute" in result.stderr
    import io

    data = pl.read_csv(io.StringIO(result.stdout))
    assert data.height == 570 and data.columns[-1] == "advantage"


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

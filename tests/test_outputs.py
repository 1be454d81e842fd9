"""Trust in what grpo-adv writes and says: one-line errors, special files written as streams,
compressed outputs, checks before output paths, repeated inputs, NaN in JSONL, full disks
and what killed runs leave behind."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from hypothesis import settings
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import InputError, one_line
from grpo_cli.io.read import read_rewards
from grpo_cli.io.temporaries import remove_stale_temporaries
from tests.conftest import ROOT, SAMPLE_FILES

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _sample(tmp_path: Path, name: str = "log.parquet") -> Path:
    target = tmp_path / name
    shutil.copyfile(SAMPLE_FILES["parquet"], target)
    return target


def _expected(source: Path) -> pl.DataFrame:
    """The annotated log as compute writes it to an ordinary file."""
    out = source.with_name("expected.parquet")
    result = CliRunner().invoke(app, ["compute", str(source), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    frame = pl.read_parquet(out)
    out.unlink()
    return frame


def _assert_same_annotation(written: pl.DataFrame, expected: pl.DataFrame) -> None:
    """Equal inputs columns; advantages equal up to the streaming engine's last bit."""
    assert written.drop("advantage").equals(expected.drop("advantage"))
    assert written["advantage"].to_list() == pytest.approx(expected["advantage"].to_list())


# --------------------------------------------------------------------------- one line


def test_one_line_escapes_control_characters() -> None:
    assert one_line("plain text é 😀") == "plain text é 😀"
    assert one_line("a\nb\r\tc\x00d\u2028e") == "a\\nb\\r\\tc\\x00d\\u2028e"
    error = InputError("has no rows (columns: a\nb)", hint="x\x00y")
    assert error.message == "has no rows (columns: a\\nb)"
    assert str(error) == error.message and error.hint == "x\\x00y"
    error.text += " and\nmore"  # callers append details later: still one line
    assert error.message == "has no rows (columns: a\\nb) and\\nmore"
    assert error.args == (error.message,)


def test_a_newline_in_a_column_name_gives_a_one_line_error(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("q.csv").write_bytes(b'"a\nb"\n')
    result = runner.invoke(app, ["compute", "q.csv"])
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        "error: q.csv has no rows (columns: a\\nb)",
        "hint: give a reward log with at least one row",
    ]


def test_the_fuzz_input_that_failed_by_chance(runner: CliRunner) -> None:
    """Hypothesis found ``"\\n\\x00`` once; every error is one line whatever the input."""
    result = runner.invoke(app, ["compute", "-", "-q", "-o", "-"], input=b'"\n\x00')
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert lines[0] == "error: <stdin> is not a text log (a NUL byte at offset 2)"


def test_property_tests_are_derandomized_in_ci() -> None:
    """CI loads the derandomized profile (no example database), so the suite cannot fail by
    chance there; locally the search stays random."""
    ci = settings.get_profile("ci")
    assert ci.derandomize is True and ci.database is None
    chosen = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    assert settings.default is not None
    assert settings.default.derandomize is (chosen == "ci")


# --------------------------------------------------------------------------- special files


def test_a_fifo_is_written_as_a_stream_and_stays_a_fifo(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = runner.invoke(app, ["compute", str(source), "-o", str(fifo), "--force", "-q"])
    reader.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    import io

    _assert_same_annotation(pl.read_parquet(io.BytesIO(received[0])), _expected(source))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "pipe"]


def test_a_fifo_input_is_read_once(runner: CliRunner, tmp_path: Path) -> None:
    """A pipe named without a suffix (``<(cat log.csv)``): its format is sniffed as it is
    read, once; no output is named after it unread."""
    source = _sample(tmp_path, "log.csv")
    pl.read_parquet(SAMPLE_FILES["parquet"]).write_csv(source)
    fifo, out, direct = tmp_path / "pipe", tmp_path / "out.csv", tmp_path / "direct.csv"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(source.read_bytes()))
    writer.start()
    # a run that opened the pipe twice would wait for a second writer (the timeout fails it)
    command = [sys.executable, "-m", "grpo_cli", "compute", str(fifo)]
    done = subprocess.run([*command, "-o", str(out), "-q"], capture_output=True, timeout=60)
    writer.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert runner.invoke(app, ["compute", str(source), "-o", str(direct), "-q"]).exit_code == 0
    # the same annotation (the default engine's parallel sums may differ in the last bit)
    assert_frame_equal(pl.read_csv(out), pl.read_csv(direct), rel_tol=1e-12, abs_tol=1e-12)
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: cannot tell the format of {fifo} before reading it (a stream)",
        "hint: name it with --format FMT, or give -o PATH",
    ]


def test_dev_null_needs_no_force_and_is_never_replaced(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    for extra in ([], ["--force"]):
        result = runner.invoke(app, ["compute", str(source), "-o", "/dev/null", "-q", *extra])
        assert result.exit_code == 0, result.stderr
        assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)


@pytest.mark.skipif(not IS_ROOT, reason="mknod needs root")
def test_a_device_node_is_not_turned_into_a_file(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    node = tmp_path / "nulldev"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    result = runner.invoke(app, ["compute", str(source), "-o", str(node), "--force", "-q"])
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISCHR(node.stat().st_mode) and node.stat().st_rdev == os.makedev(1, 3)


@pytest.mark.slow
def test_process_substitution_and_dev_stdout(tmp_path: Path) -> None:
    """``-o >(gzip > x.gz)`` and ``-o /dev/stdout`` (to a file) are streams: no "already
    exists", no temporary file beside /dev/fd."""
    source = _sample(tmp_path)
    grpo = Path(sys.executable).with_name("grpo-adv")
    script = (  # `wait $!` waits for the substituted gzip (a bare `wait` does not)
        f"'{grpo}' compute '{source}' -q --output-format csv -o >(gzip > '{tmp_path}/x.csv.gz')"
        f"; status=$?; wait $! && [ $status = 0 ]"
        f" && '{grpo}' compute '{source}' -q --output-format csv -o /dev/stdout"
        f" > '{tmp_path}/stdout.csv'"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected = _expected(source)
    assert read_rewards(tmp_path / "x.csv.gz").frame.height == expected.height
    from_stdout = pl.read_csv(tmp_path / "stdout.csv")
    assert from_stdout["advantage"].to_list() == pytest.approx(expected["advantage"].to_list())


# --------------------------------------------------------------------------- compressed


@pytest.mark.parametrize(
    ("name", "opener"),
    [
        ("o.jsonl.gz", gzip.open),
        ("o.csv.bz2", bz2.open),
        ("o.jsonl.xz", lzma.open),
        ("o.csv.zst", None),
        ("o.parquet.gz", gzip.open),
    ],
)
def test_compressed_output_names_are_compressed(
    runner: CliRunner, tmp_path: Path, name: str, opener: object
) -> None:
    source = _sample(tmp_path)
    out = tmp_path / name
    result = runner.invoke(app, ["compute", str(source), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    head = out.read_bytes()[:4]
    magic = {".gz": b"\x1f\x8b", ".bz2": b"BZh", ".xz": b"\xfd7zX", ".zst": b"\x28\xb5\x2f\xfd"}
    assert head.startswith(magic[out.suffix])
    back = read_rewards(out).frame
    expected = _expected(source)
    assert back.columns == expected.columns and back.height == expected.height
    assert back["advantage"].to_list() == pytest.approx(expected["advantage"].to_list())
    if callable(opener):  # the standard tools read it too
        with opener(out, "rb") as handle:
            assert len(handle.read()) > 0


def test_compressed_tables(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    summary = tmp_path / "groups.csv.gz"
    steps = tmp_path / "steps.json.gz"
    result = runner.invoke(
        app, ["compute", str(source), "-o", str(tmp_path / "o.parquet"), "--summary", str(summary)]
    )
    assert result.exit_code == 0, result.stderr
    groups = pl.read_csv(gzip.decompress(summary.read_bytes()))
    assert groups.height == 64 and groups.columns[:2] == ["step", "prompt_id"]
    result = runner.invoke(app, ["summarize", str(source), "-o", str(steps), "-q"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(gzip.decompress(steps.read_bytes()))
    assert [row["step"] for row in rows] == sorted(pl.read_parquet(source)["step"].unique())


# --------------------------------------------------------------------------- order, repeats


def test_options_are_checked_before_the_output_path(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    (tmp_path / "log.adv.parquet").write_bytes(b"earlier")
    result = runner.invoke(app, ["compute", str(source), "-e", "grpoo"])
    assert result.exit_code == 2
    assert "grpoo" in result.stderr.splitlines()[0]
    result = runner.invoke(app, ["compute", str(source), "--summary", str(tmp_path / "s.txt")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: cannot tell the table format of {tmp_path}/s.txt",
        "hint: end the file name with .parquet, .csv, .jsonl, .json, .arrow or .md, or name the "
        "format with --summary-format",
    ]
    assert (tmp_path / "log.adv.parquet").read_bytes() == b"earlier"


@pytest.mark.parametrize("backend", ["polars", "torch"])
@pytest.mark.parametrize("taken", ["output", "summary_path"])
def test_the_targets_are_checked_before_the_log_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, taken: str
) -> None:
    """An in-memory engine refuses an existing output or summary before it reads a byte,
    as the file engines do: the log piped in is left whole for the next reader."""
    from grpo_cli.core.errors import OutputError
    from grpo_cli.jobs.run import run_job

    log = SAMPLE_FILES["csv"].read_bytes()
    piped, existing = tmp_path / "piped.csv", tmp_path / "taken.csv"
    piped.write_bytes(log)
    existing.write_bytes(b"earlier")
    targets = {"output": tmp_path / "new.csv", taken: existing}
    with piped.open("rb") as raw:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw))
        with pytest.raises(OutputError) as refused:
            run_job(["-"], engine={"backend": backend}, **targets)  # type: ignore[arg-type]
        assert sys.stdin.buffer.read() == log
    assert str(refused.value) == f"{existing} already exists"
    assert existing.read_bytes() == b"earlier"
    assert not (tmp_path / "new.csv").exists()


@pytest.mark.parametrize("name", ["out.xlsx", "out.txt", "out.txt.gz"])
@pytest.mark.parametrize("command", ["compute", "compare -e grpo -e rloo"])
def test_an_output_suffix_no_format_names_is_refused(
    runner: CliRunner, tmp_path: Path, name: str, command: str
) -> None:
    source = _sample(tmp_path)
    out = tmp_path / name
    result = runner.invoke(app, [*command.split(), str(source), "-o", str(out)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: cannot tell the output format of {out}",
        "hint: end the file name with .parquet, .csv, .jsonl, .json or .arrow, or name the format "
        "with --output-format",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]
    chosen = runner.invoke(
        app, [*command.split(), str(source), "-o", str(out), "--output-format", "csv", "-q"]
    )
    assert chosen.exit_code == 0, chosen.stderr
    text = gzip.decompress(out.read_bytes()) if name.endswith(".gz") else out.read_bytes()
    assert pl.read_csv(text).height == pl.read_parquet(source).height


def test_an_input_given_twice_is_refused(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(SAMPLE_FILES["jsonl"], "1.jsonl")
    shutil.copyfile(SAMPLE_FILES["jsonl"], "2.jsonl")
    result = runner.invoke(app, ["compute", "1.jsonl", "1.jsonl", "-o", "-"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: the input 1.jsonl is given twice: its rows would count twice",
        "hint: give each file once (check overlapping globs and folders)",
    ]
    result = runner.invoke(app, ["compute", "*.jsonl", "1*", "-o", "-"])
    assert result.exit_code == 2 and "1.jsonl is given twice" in result.stderr
    result = runner.invoke(app, ["compute", ".", "2.jsonl", "-o", "-", "-q"])
    assert result.exit_code == 2 and "2.jsonl is given twice" in result.stderr
    result = runner.invoke(app, ["compute", "1.jsonl", "2.jsonl", "-o", "-", "-q"])
    assert result.exit_code == 0  # two different files with the same content are fine


# --------------------------------------------------------------------------- NaN in JSONL


def test_nan_in_jsonl_is_a_null_reward_like_csv(runner: CliRunner, tmp_path: Path) -> None:
    rows = [
        {"prompt_id": "a", "reward": 1.0, "note": "NaN in text stays text"},
        {"prompt_id": "a", "reward": float("nan"), "note": "x"},
        {"prompt_id": "a", "reward": 0.0, "note": "y"},
        {"prompt_id": "b", "reward": 2.0, "note": "z"},
        {"prompt_id": "b", "reward": 4.0, "note": "w"},
    ]
    jsonl = tmp_path / "nan.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert "NaN" in jsonl.read_text().splitlines()[1]  # Python's json writes the literal
    csv = tmp_path / "nan.csv"
    pl.DataFrame(rows).write_csv(csv)
    outs = {}
    for path in (jsonl, csv):
        out = tmp_path / f"{path.suffix[1:]}.out.parquet"
        result = runner.invoke(app, ["compute", str(path), "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        assert "1 null or NaN reward(s)" in result.stderr
        outs[path.suffix] = pl.read_parquet(out)
    adv = outs[".jsonl"]["advantage"].to_list()
    assert adv[1] is None
    assert adv[0] == pytest.approx(0.5 / (0.5**0.5 + 1e-8))
    assert adv[3] == pytest.approx(-1 / (2**0.5 + 1e-8))
    assert adv == outs[".csv"]["advantage"].to_list()
    assert outs[".jsonl"]["note"][0] == "NaN in text stays text"


def test_infinity_in_jsonl_is_still_refused(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "inf.jsonl"
    path.write_text('{"prompt_id": "a", "reward": 1.0}\n{"prompt_id": "a", "reward": Infinity}\n')
    result = runner.invoke(app, ["compute", str(path), "-o", "-"])
    assert result.exit_code == 3
    assert result.stderr.splitlines()[0] == f"error: {path} line 2: Infinity is not JSON"


# --------------------------------------------------------------------------- full disks


def test_dev_full_is_an_output_error(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    result = runner.invoke(
        app, ["compute", str(source), "-o", "/dev/full", "--output-format", "csv"]
    )
    assert result.exit_code == 4
    assert result.stderr.splitlines()[0] == "error: no space left on device writing /dev/full"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 kB tmpfs (needs root and permission to mount; skipped otherwise)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if not IS_ROOT or shutil.which("mount") is None:
        pytest.skip("a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


@pytest.fixture
def big_log(tmp_path: Path) -> Path:
    """200k rows: its annotated output (a few MB) does not fit the small tmpfs."""
    import numpy as np

    n = 200_000
    rewards = np.random.default_rng(7).random(n)  # incompressible: the output is MBs
    frame = pl.DataFrame({"prompt_id": [f"p{i // 8:06d}" for i in range(n)], "reward": rewards})
    path = tmp_path / "big.parquet"
    frame.write_parquet(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["-o", "{disk}/o.parquet"],
        ["-o", "{disk}/o.csv"],
        ["-o", "{disk}/o.jsonl.gz"],
        ["--low-memory", "-o", "{disk}/o.parquet"],
        ["-o", "{tmp}/kept.parquet", "--force", "--summary", "{disk}/groups.csv"],
    ],
    ids=["parquet", "csv", "jsonl.gz", "low-memory", "summary"],
)
def test_a_full_disk_is_an_output_error_and_leaves_nothing(
    runner: CliRunner, full_disk: Path, big_log: Path, tmp_path: Path, args: list[str]
) -> None:
    kept = tmp_path / "kept.parquet"
    kept.write_bytes(b"the user's earlier output")
    shown = [a.format(disk=full_disk, tmp=tmp_path) for a in args]
    result = runner.invoke(app, ["compute", str(big_log), *shown])
    assert result.exit_code == 4, result.stderr
    named = next(a for a in shown if a.startswith(str(full_disk)))
    assert result.stderr.splitlines() == [
        f"error: no space left on the device of {named}; nothing was written",
        f"hint: free some space on it (df -h {full_disk}), or write elsewhere with -o",
    ]
    assert list(full_disk.iterdir()) == []
    assert kept.read_bytes() == b"the user's earlier output"  # outputs land together or not


# --------------------------------------------------------------------------- killed runs


def _stalled_low_memory_script() -> str:
    """grpo-adv --low-memory that signals the test once its worker is done (its spill
    folder and temporary output exist), then stalls."""
    return (
        "import sys, time, pathlib\n"
        "import grpo_cli.engines.partitioned as lowmem\n"
        "marker = pathlib.Path(sys.argv[1])\n"
        "def stalled(*args, **kwargs):\n"
        "    marker.touch()\n"
        "    time.sleep(120)\n"
        "lowmem._outcome = stalled\n"
        "sys.argv = ['grpo-adv', *sys.argv[2:]]\n"
        "from grpo_cli.cli import main\n"
        "main()\n"
    )


def _start_stalled_run(folder: Path, source: Path, out: Path) -> subprocess.Popen[str]:
    marker = folder / f"marker-{out.name}"
    process = subprocess.Popen(
        [sys.executable, "-c", _stalled_low_memory_script(), str(marker), "compute",
         str(source), "--low-memory", "-o", str(out), "-q"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    marker.unlink()
    return process


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.slow
def test_the_next_run_removes_what_a_killed_run_left(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    out = tmp_path / "out.parquet"
    process = _start_stalled_run(tmp_path, source, out)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    left = _temporaries(tmp_path)
    tag = f"grpo-adv.{process.pid}@"
    assert len(left) == 2 and all(tag in name for name in left)  # the spill folder, the .part
    assert any(name.endswith(".spill") for name in left)
    assert any(name.startswith(".out.parquet.") and name.endswith(".part") for name in left)
    result = runner.invoke(app, ["compute", str(source), "--low-memory", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    warning = result.stderr.splitlines()[0]
    assert warning.startswith(
        f"warning: removed 2 leftover(s) of killed grpo-adv runs in {tmp_path} ("
    )
    assert _temporaries(tmp_path) == []
    _assert_same_annotation(pl.read_parquet(out), _expected(source))


@pytest.mark.slow
def test_a_live_run_and_untagged_files_are_left_alone(runner: CliRunner, tmp_path: Path) -> None:
    source = _sample(tmp_path)
    process = _start_stalled_run(tmp_path, source, tmp_path / "slow.parquet")
    try:
        live = _temporaries(tmp_path)
        assert len(live) == 2
        untagged = tmp_path / ".notes.part"
        untagged.write_text("mine")
        elsewhere = tmp_path / ".o.parquet.grpo-adv.1@some-other-host.abc.part"
        elsewhere.write_text("another machine's run")
        result = runner.invoke(app, ["compute", str(source), "-o", str(tmp_path / "fast.csv")])
        assert result.exit_code == 0, result.stderr
        assert "leftover" not in result.stderr
        assert _temporaries(tmp_path) == sorted([*live, untagged.name, elsewhere.name])
    finally:
        process.kill()
        process.wait(timeout=30)
    removed, size = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == live and size > 0
    assert _temporaries(tmp_path) == sorted([untagged.name, elsewhere.name])


def test_owner_tags_name_this_host() -> None:
    import re

    from grpo_cli.io.temporaries import OWNER_PATTERN, owner_tag

    match = OWNER_PATTERN.search(f".x.{owner_tag()}.abc.part")
    assert match is not None and int(match["pid"]) == os.getpid()
    assert match["host"] == re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())


@pytest.mark.slow
def test_low_memory_refuses_groups_across_batches(runner: CliRunner, tmp_path: Path) -> None:
    """--low-memory keeps the in-memory path's rule: with a batch column, groups stay
    within one batch or the run refuses with the fix."""
    source = tmp_path / "span.parquet"
    pl.DataFrame(
        {
            "prompt_id": ["p1", "p1", "p1", "p2", "p2"],
            "step": [1, 1, 2, 1, 1],
            "reward": [1.0, 0, 1, 0, 1],
        }
    ).write_parquet(source)
    out = tmp_path / "o.parquet"
    pooled = ["-g", "prompt_id", "--batch-col", "step"]
    result = runner.invoke(app, ["compute", str(source), "--low-memory", *pooled, "-o", str(out)])
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        "error: groups (by prompt_id) span several values of step (batch column): at least 1 do",
        "hint: group within each batch: -g step -g prompt_id",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["span.parquet"]
    args = ["compute", str(source), "--low-memory", "--batch-col", "step", "-g", "step"]
    result = runner.invoke(app, [*args, "-g", "prompt_id", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    a = 0.5 / (0.5**0.5 + 1e-8)  # a group (1, 0): mean 0.5, sample std sqrt(0.5)
    assert pl.read_parquet(out)["advantage"].to_list() == pytest.approx([a, -a, 0.0, -a, a])


class TestAtomicFolder:
    """Folders of part files (``--backend ray``) land whole or not at all."""

    def test_a_failure_leaves_what_was_there(self, tmp_path: Path) -> None:
        from grpo_cli.io.atomic import atomic_folder

        target = tmp_path / "out"
        target.mkdir()
        (target / "old.parquet").write_text("old")
        with pytest.raises(RuntimeError), atomic_folder(target) as staged:
            (staged / "part-0.parquet").write_text("new")
            raise RuntimeError("the cluster failed")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        assert sorted(p.name for p in target.iterdir()) == ["old.parquet"]

    def test_success_replaces_the_folder(self, tmp_path: Path) -> None:
        from grpo_cli.io.atomic import atomic_folder

        target = tmp_path / "out"
        target.mkdir()
        (target / "old.parquet").write_text("old")
        with atomic_folder(target, force=True) as staged:
            assert staged.parent == tmp_path and staged.name.startswith(".out.grpo-adv.")
            (staged / "part-0.parquet").write_text("new")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        assert sorted(p.name for p in target.iterdir()) == ["part-0.parquet"]

    def test_an_existing_folder_needs_force(self, tmp_path: Path) -> None:
        from grpo_cli.core.errors import OutputError
        from grpo_cli.io.atomic import check_output_folder

        (tmp_path / "out").mkdir()
        with pytest.raises(OutputError, match="already exists"):
            check_output_folder(tmp_path / "out", force=False)
        check_output_folder(tmp_path / "out", force=True)
        with pytest.raises(OutputError, match="refusing to overwrite the input"):
            check_output_folder(tmp_path, force=True, protected=[tmp_path / "in.parquet"])


# --------------------------------------------------------------------------- overlapping runs


class TestExclusiveRenames:
    """Without --force, the final rename fails if the output appeared while the run wrote
    (another run): exit 4 naming it, its own temporaries removed, the other's file kept."""

    def test_a_file_that_appears_meanwhile_is_kept(self, tmp_path: Path) -> None:
        from grpo_cli.core.errors import OutputError
        from grpo_cli.io.atomic import atomic_path

        target = tmp_path / "out.csv"
        with pytest.raises(OutputError) as caught, atomic_path(target) as tmp:
            tmp.write_text("ours")
            target.write_text("the other run's")
        assert caught.value.message == (
            f"{target} already exists: another run wrote it while this one ran; this run "
            "wrote nothing"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
        assert target.read_text() == "the other run's"
        with atomic_path(target, force=True) as tmp:  # --force replaces, atomically
            tmp.write_text("ours")
        assert target.read_text() == "ours"

    def test_outputs_that_land_together_are_undone_together(self, tmp_path: Path) -> None:
        from grpo_cli.core.errors import OutputError
        from grpo_cli.io.atomic import atomic_writes

        first, second = tmp_path / "a.csv", tmp_path / "b.csv"
        with pytest.raises(OutputError, match=r"b\.csv already exists"), atomic_writes() as stage:
            stage(first, lambda sink: None)
            stage(second, lambda sink: None)
            second.write_text("the other run's")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv"]
        assert second.read_text() == "the other run's"

    def test_a_folder_that_appears_meanwhile_is_kept(self, tmp_path: Path) -> None:
        from grpo_cli.core.errors import OutputError
        from grpo_cli.io.atomic import atomic_folder

        target = tmp_path / "out"
        with pytest.raises(OutputError, match="already exists"), atomic_folder(target) as staged:
            (staged / "part-0.parquet").write_text("ours")
            target.mkdir()
            (target / "part-0.parquet").write_text("the other run's")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        assert (target / "part-0.parquet").read_text() == "the other run's"

    def test_the_fallback_without_renameat2(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where renameat2 is missing: a hard link for a file, an exclusive mkdir for a
        folder; both refuse an existing target."""
        import grpo_cli.io.atomic as gio
        from grpo_cli.core.errors import OutputError

        monkeypatch.setattr(gio, "_rename_noreplace", lambda source, target: False)

        def as_file(path: Path) -> None:
            path.write_text("x")

        for make in (as_file, Path.mkdir):
            tmp, target = tmp_path / ".tmp", tmp_path / "target"
            make(tmp)
            gio.publish(tmp, target, replace=False)
            assert target.exists() and not tmp.exists()
            make(tmp)
            with pytest.raises(OutputError, match="already exists"):
                gio.publish(tmp, target, replace=False)
            assert tmp.exists()
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
            shutil.rmtree(target) if target.is_dir() else target.unlink()

    @pytest.mark.slow
    def test_runs_started_together(self, tmp_path: Path) -> None:
        """Four real runs (two on each engine) write one output without --force: one
        writes it, the other three exit 4, nothing else is left."""
        source = _sample(tmp_path)
        out = tmp_path / "out.parquet"
        command = [sys.executable, "-m", "grpo_cli", "compute", str(source), "-o", str(out), "-q"]
        runs = [
            subprocess.Popen(
                [*command, *extra],
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stderr=subprocess.PIPE,
                text=True,
            )
            for extra in ([], ["--low-memory"], [], ["--low-memory"])
        ]
        results = [(run.wait(timeout=120), run.stderr.read() if run.stderr else "") for run in runs]
        codes = sorted(code for code, _ in results)
        assert codes == [0, 4, 4, 4], results
        for code, stderr in results:
            if code == 4:
                assert stderr.startswith(f"error: {out} already exists")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]
        _assert_same_annotation(pl.read_parquet(out), _expected(source))


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["compute"], ["compute", "--low-memory"], ["compare", "-e", "grpo", "-e", "rloo"]],
    ids=["default", "low-memory", "compare"],
)
def test_a_refused_rerun_still_removes_dead_runs_leftovers(
    runner: CliRunner, tmp_path: Path, command: list[str]
) -> None:
    source = _sample(tmp_path)
    out = tmp_path / "out.parquet"
    out.write_bytes(b"the user's earlier output")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f".out.parquet.grpo-adv.{dead.pid}@{_host_tag()}.abc.part"
    leftover.write_bytes(b"x" * 10)
    result = runner.invoke(app, [command[0], str(source), "-o", str(out), *command[1:]])
    assert result.exit_code == 4
    assert result.stderr.splitlines()[0] == (
        f"warning: removed 1 leftover(s) of killed grpo-adv runs in {tmp_path} (10 B): "
        f"{leftover.name}"
    )
    assert result.stderr.splitlines()[1] == f"error: {out} already exists"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]
    assert out.read_bytes() == b"the user's earlier output"


def _host_tag() -> str:
    import re

    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def test_a_signal_after_the_rename_decision_is_a_success(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that arrives while the outputs are being put in place cannot split them or
    be reported as "no output was written": the run ends with 0 and both outputs."""
    import grpo_cli.io.atomic as gio

    real = gio.publish

    def publish_then_interrupted(tmp: Path, target: Path, *, replace: bool) -> None:
        real(tmp, target, replace=replace)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(gio, "publish", publish_then_interrupted)
    source = _sample(tmp_path)
    out, groups = tmp_path / "out.parquet", tmp_path / "groups.csv"
    args = ["compute", str(source), "-o", str(out), "--summary", str(groups), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["groups.csv", "log.parquet", "out.parquet"]
    _assert_same_annotation(pl.read_parquet(out), _expected(source))

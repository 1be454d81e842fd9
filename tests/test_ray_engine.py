"""``--backend ray`` on a real Ray: an embedded local instance (``ray.init(num_cpus=2)``) and
a cluster started with ``ray start --head`` on a free port. Every result is compared with the
Polars engine on the same rows; groups are spread over several shards."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import Message
from grpo_cli.jobs.pipeline import annotate
from tests.bad_inputs.corpus import _cut_with_footer
from tests.conftest import ROOT, import_or_skip
from tests.test_group_spans import WRONG_GROUPINGS
from tests.test_group_spans import log as group_log

ray = import_or_skip("ray")

BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One embedded Ray for the module: the engine uses a Ray the caller has started."""
    import logging

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


def reward_log(rows: int = 1200, seed: int = 3) -> pl.DataFrame:
    """Rows in random order (so every shard holds part of most groups): 150 prompts over
    3 steps, uneven group sizes, null rewards, zero-variance groups, a verl-style uid."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 150, rows)
    step = prompt % 3
    reward = rng.integers(0, 5, rows) / 4.0
    reward = np.where(prompt % 11 == 0, 0.5, reward)  # zero-variance groups
    frame = pl.DataFrame(
        {
            "rid": np.arange(rows),
            "prompt_id": [f"p{p:03d}" for p in prompt],
            "step": step,
            "reward": reward,
            "format_reward": rng.integers(0, 2, rows).astype(float),
            "length": rng.integers(1, 60, rows),
            "uid": [f"u{p:03d}_{s}_{i}" for i, (p, s) in enumerate(zip(prompt, step, strict=True))],
            "completion": [f"answer {i}" for i in range(rows)],
        }
    )
    return frame.with_columns(
        pl.when(pl.col("rid") % 97 == 5).then(None).otherwise(pl.col("reward")).alias("reward")
    )


def write_shards(
    log: pl.DataFrame, folder: Path, shards: int = 4, fmt: str = "parquet"
) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    size = -(-log.height // shards)
    for k in range(shards):
        part = log.slice(k * size, size)
        path = folder / f"shard-{k}.{fmt}"
        if fmt == "parquet":
            part.write_parquet(path)
        elif fmt == "jsonl":
            part.write_ndjson(path)
        else:
            part.write_csv(path)
        paths.append(path)
    return paths


def read_parts(folder: Path) -> pl.DataFrame:
    files = sorted(folder.glob("*.parquet"))
    assert files, f"no part files in {folder}"
    return pl.concat([pl.read_parquet(f) for f in files]).sort("rid")


def assert_same(got: pl.DataFrame, expected: pl.DataFrame, tol: float = 1e-12) -> None:
    """Every row once, every column unchanged, the advantages within ``tol``."""
    expected = expected.sort("rid")
    assert got.columns == expected.columns
    assert got["rid"].to_list() == expected["rid"].to_list()
    for column in expected.columns:
        if expected[column].dtype == pl.Float64 and column not in {"reward", "format_reward"}:
            a, b = got[column], expected[column]
            assert (a.is_null() == b.is_null()).all(), column
            worst = (a - b).abs().max()
            assert worst is None or float(worst) <= tol, column  # type: ignore[arg-type]
        else:
            assert got[column].equals(expected[column]), column


def run_cli(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    ("grpo", [], {}),
    (
        "batch_std_per_step",
        ["-e", "batch_std", "--batch-col", "step", "-g", "step", "-g", "prompt_id"],
        {"estimator": "batch_std", "batch_col": "step", "group_cols": ("step", "prompt_id")},
    ),
    (
        "reinforce_pp_baseline_shaped_clip",
        ["-e", "reinforce_pp_baseline", "--clip", "-0.5,0.5", "--clip-stage", "shaped"],
        {"estimator": "reinforce_pp_baseline", "clip": (-0.5, 0.5), "clip_stage": "shaped"},
    ),
    ("gpg", ["-e", "gpg", "--nulls", "zero"], {"estimator": "gpg", "nulls": "zero"}),
    (
        "reinforce_pp_token_weighted",
        ["-e", "reinforce_pp", "--length-col", "length", "--token-weighted"],
        {"estimator": "reinforce_pp", "length_col": "length", "token_weighted": True},
    ),
    (
        "gdpo",
        [
            "-r", "reward", "-r", "format_reward", "--reward-weights", "1,0.5",
            "--aggregation", "normalize_then_sum",
        ],
        {
            "reward_cols": ("reward", "format_reward"),
            "reward_weights": (1.0, 0.5),
            "aggregation": "normalize_then_sum",
        },
    ),
    (
        "loo_grpo_whiten_tokens_reward_clip",
        [
            "-e", "loo_grpo", "--eps-mode", "positive_std", "--whiten", "--whiten-ddof", "0",
            "--whiten-eps-mode", "std", "--length-col", "length", "--token-weighted",
            "--reward-clip", "0,0.5",
        ],
        {
            "estimator": "loo_grpo", "eps_mode": "positive_std", "whiten": True,
            "whiten_ddof": 0, "whiten_eps_mode": "std", "length_col": "length",
            "token_weighted": True, "reward_clip": (0.0, 0.5),
        },
    ),
    (
        "batch_baseline_per_step",
        ["-e", "batch_baseline", "--batch-col", "step"],
        {"estimator": "batch_baseline", "batch_col": "step"},
    ),
    (
        "rloo_singleton_verl_stats",
        ["-e", "rloo", "--singleton", "verl", "--with-stats"],
        {"estimator": "rloo", "singleton": "verl", "with_stats": True},
    ),
]  # fmt: skip


@pytest.mark.usefixtures("local_ray")
class TestSameAsPolars:
    @pytest.mark.parametrize(("cli", "options"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
    def test_estimators(
        self, runner: CliRunner, tmp_path: Path, cli: list[str], options: dict[str, Any]
    ) -> None:
        log = reward_log()
        shards = write_shards(log, tmp_path / "in")
        out = tmp_path / "out"
        result = run_cli(
            runner, "compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(out), *cli
        )
        assert result.exit_code == 0, result.output
        assert_same(read_parts(out), annotate(log, **options).frame)
        assert len(shards) == 4

    @pytest.mark.parametrize("preset", ["verl", "openrlhf-group-norm"])
    def test_presets(self, runner: CliRunner, tmp_path: Path, preset: str) -> None:
        """verl's dump layout: the uid group is derived per block, groups are per step, the
        reward is ``score``; the derived column is never written."""
        log = (
            reward_log().rename({"reward": "score"}) if preset.startswith("verl") else reward_log()
        )
        write_shards(log, tmp_path / "in", shards=3)
        out = tmp_path / "out"
        result = run_cli(
            runner, "compute", *map(str, sorted((tmp_path / "in").iterdir())),
            "--backend", "ray", "--preset", preset, "-o", str(out),
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert_same(read_parts(out), annotate(log, preset).frame)

    def test_rows_repeated_in_their_group_are_the_same_warning(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        """The first 30 rows read again in the last shard: the in-memory engine's warning,
        counted over the partitions, its first row read back from its piece."""
        log = reward_log(rows=300).with_columns(pl.col("rid").alias("completion_id"))
        log = pl.concat([log, log.head(30)])
        write_shards(log, tmp_path / "in", shards=3)
        out = tmp_path / "out"
        result = run_cli(
            runner, "compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(out)
        )
        assert result.exit_code == 0, result.output
        expected = [str(w) for w in annotate(log).warnings if "repeat" in str(w)]
        assert expected[0].startswith("30 rows repeat a completion_id within their group (e.g. ")
        found = [
            line
            for line in result.stderr.splitlines()
            if line.startswith("warning:") and "repeat" in line
        ]
        assert found == [f"warning: {expected[0]}"]

    @pytest.mark.parametrize(("rows", "grouping", "expected"), WRONG_GROUPINGS)
    def test_wrong_grouping_is_the_same_warning(
        self,
        runner: CliRunner,
        tmp_path: Path,
        rows: list[tuple[int, str, float]],
        grouping: tuple[str, ...],
        expected: str,
    ) -> None:
        """Groups pooled across steps and a key that makes every group one response, each
        step a shard (a pooled group's rows in several pieces): the in-memory engine's
        line, found by the partitions, its first row read back from its piece."""
        folder = tmp_path / "in"
        folder.mkdir()
        frame = group_log(rows)
        for k, step in enumerate(frame["step"].unique(maintain_order=True)):
            frame.filter(pl.col("step") == step).write_parquet(folder / f"{k}.parquet")
        out = str(tmp_path / "out")
        result = run_cli(runner, "compute", str(folder), *grouping, "--backend", "ray", "-o", out)
        assert result.exit_code == 0, result.output
        warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert warned == [expected]

    def test_run_summary_and_group_table(self, tmp_path: Path) -> None:
        """The figures come from per-block partials merged on the driver; the per-group
        table (``--summary DIR``) is a folder of parts with the in-memory table's rows."""
        from grpo_cli.core.engine_options import EngineOptions
        from grpo_cli.core.options import AdvantageOptions
        from grpo_cli.core.resolve import make_request, resolve
        from grpo_cli.engines import FileJob, get_engine

        log = reward_log()
        shards = write_shards(log, tmp_path / "in")
        out, groups = tmp_path / "out", tmp_path / "groups"
        out.mkdir()
        groups.mkdir()
        options = AdvantageOptions()
        plan = resolve(
            make_request(options=options, engine=EngineOptions(backend="ray")), log.schema
        )
        engine: Any = get_engine("ray")
        run = engine.annotate_files(FileJob(tuple(shards), out, plan, groups=groups))
        expected = annotate(log, group_cols=("prompt_id",))  # the options above, as given
        for name in (
            "rows", "groups", "batches", "group_size_min", "group_size_median",
            "group_size_max", "zero_std_groups", "singleton_groups", "null_rewards",
        ):  # fmt: skip
            assert getattr(run, name) == getattr(expected.run, name), name
        for name in (
            "reward_mean", "reward_std", "frac_reward_zero_std", "zero_std_group_share",
            "advantage_min", "advantage_max",
        ):  # fmt: skip
            assert getattr(run, name) == pytest.approx(getattr(expected.run, name), rel=1e-12)
        table = read_parts_unsorted(groups).sort("prompt_id")
        assert_frame_equal(table, expected.groups.sort("prompt_id"), rel_tol=1e-12, abs_tol=0)

    @pytest.mark.parametrize("fmt", ["jsonl", "csv"])
    def test_text_shards(self, runner: CliRunner, tmp_path: Path, fmt: str) -> None:
        log = reward_log(rows=400)
        write_shards(log, tmp_path / "in", shards=3, fmt=fmt)
        out, groups = tmp_path / "out", tmp_path / "groups"
        result = run_cli(
            runner, "compute", str(tmp_path / "in" / f"*.{fmt}"), "--backend", "ray",
            "-o", str(out), "--summary", str(groups),
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        expected = annotate(log)
        assert_same(read_parts(out), expected.frame)
        table = read_parts_unsorted(groups).sort("prompt_id")
        assert_frame_equal(table, expected.groups.sort("prompt_id"), rel_tol=1e-12, abs_tol=0)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["groups", "in", "out"]

    def test_arrow_ipc_shards(self, runner: CliRunner, tmp_path: Path) -> None:
        """Arrow IPC files (scanned in pieces) and an IPC stream as Hugging Face datasets
        caches it (read whole) give the numbers of the whole log."""
        log = reward_log(rows=400)
        folder = tmp_path / "in"
        folder.mkdir()
        size = -(-log.height // 3)
        log.slice(0, size).write_ipc(folder / "a.arrow")
        log.slice(size, size).write_ipc_stream(folder / "b.arrow")
        log.slice(2 * size).write_ipc(folder / "c.feather", compression="zstd")
        out = tmp_path / "out"
        result = run_cli(runner, "compute", str(folder), "--backend", "ray", "-o", str(out))
        assert result.exit_code == 0, result.output
        assert_same(read_parts(out), annotate(log).frame)

    def test_run_job_from_python(self, tmp_path: Path) -> None:
        """The library's one entry runs the Ray engine too: the parts hold what
        compute_advantages returns for the whole log, notes go to the callback, and the
        result says what was written."""
        from grpo_cli import compute_advantages, run_job

        log = reward_log(rows=300)
        write_shards(log, tmp_path / "in", shards=2)
        out = tmp_path / "out"
        notes: list[Message] = []
        result = run_job(
            [tmp_path / "in"],
            out,
            options={"estimator": "rloo"},
            engine={"backend": "ray"},
            notes=notes.append,
        )
        assert_same(read_parts(out), compute_advantages(log, estimator="rloo"))
        assert result.output == f"{out}/ (Parquet parts)"
        assert result.paths == (out,)
        assert result.engine.backend == "ray"
        assert result.run.rows == 300
        assert notes == []  # a Ray the caller started: nothing to say
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def read_parts_unsorted(folder: Path) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(f) for f in sorted(folder.glob("*.parquet"))])


@pytest.mark.usefixtures("local_ray")
class TestNothingLost:
    def test_bad_value_in_one_shard(self, runner: CliRunner, tmp_path: Path) -> None:
        """A null key in the last shard: the one-line error raised on the cluster, exit 3,
        and no output folder or temporary folder."""
        log = reward_log(rows=300)
        write_shards(log, tmp_path / "in", shards=2)
        bad = pl.DataFrame({"rid": [9999], "prompt_id": [None], "reward": [1.0]}, strict=False)
        bad = pl.concat([log.head(0), bad], how="diagonal_relaxed")
        bad.write_parquet(tmp_path / "in" / "shard-9.parquet")
        assert_input_refused(
            runner, tmp_path, "1 row(s) have a null group or batch key (step, prompt_id)"
        )

    def test_existing_folder_needs_force(self, runner: CliRunner, tmp_path: Path) -> None:
        log = reward_log(rows=300)
        write_shards(log, tmp_path / "in", shards=2)
        out = tmp_path / "out"
        out.mkdir()
        (out / "keep.txt").write_text("mine")
        args = ["compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(out)]
        refused = run_cli(runner, *args)
        assert refused.exit_code == 4
        assert f"{out} already exists" in refused.output
        assert (out / "keep.txt").read_text() == "mine"
        replaced = run_cli(runner, *args, "--force")
        assert replaced.exit_code == 0, replaced.output
        assert not (out / "keep.txt").exists()
        assert_same(read_parts(out), annotate(log).frame)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]

    def test_worker_that_dies_is_retried(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first write task's worker process exits mid-task (as a killed or crashed
        worker would); Ray runs the task again and the result is still exact, each row
        written once, each part whole."""
        from ray import cloudpickle

        from grpo_cli.engines import ray_tasks

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
        marker = tmp_path / "died-once"
        monkeypatch.setattr(ray_tasks, "write_pieces", _dying_writer(str(marker)))
        log = reward_log(rows=600)
        write_shards(log, tmp_path / "in", shards=3)
        out = tmp_path / "out"
        result = run_cli(
            runner, "compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(out)
        )
        assert result.exit_code == 0, result.output
        assert marker.exists()  # a worker did die
        assert_same(read_parts(out), annotate(log).frame)
        # its half-written part is gone with the staging folder's other leftovers
        assert sorted(p.name for p in out.iterdir()) == [f"shard-{k}.parquet" for k in range(3)]

    def test_an_existing_advantage_column_in_any_file_is_refused(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        """The second shard already has an ``advantage`` column: refused as on one machine
        (exit 3), nothing written, its values not overwritten."""
        log = reward_log(rows=300)
        paths = write_shards(log, tmp_path / "in", shards=2)
        logged = log.slice(150, 150).with_columns(pl.lit(0.25).alias("advantage"))
        logged.write_parquet(paths[1])
        assert_input_refused(runner, tmp_path, "the input already has a column named 'advantage'")
        assert pl.read_parquet(paths[1])["advantage"].unique().to_list() == [0.25]


def assert_input_refused(runner: CliRunner, tmp_path: Path, message: str) -> None:
    """``compute tmp_path/in --backend ray -o tmp_path/out``: exit 3 with ``message``, no
    traceback, nothing written beside the inputs."""
    result = run_cli(
        runner, "compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(tmp_path / "out")
    )
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def _dying_writer(marker: str) -> Any:
    from grpo_cli.engines.ray_tasks import write_pieces

    def dying_writer(*args: Any) -> int:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return write_pieces(*args)
        os.close(fd)
        batch, folder = args[0], Path(args[1])
        partial = folder / f".{batch[0].name}.{os.getpid()}.tmp"  # as write_parquet names it
        partial.write_bytes(b"PAR1 half a part")
        os._exit(1)  # the worker process dies in the middle of writing

    return dying_writer


class TestRefusals:
    def test_positional_groups_are_refused(self, runner: CliRunner, tmp_path: Path) -> None:
        result = run_cli(
            runner, "compute", "x.parquet", "--backend", "ray", "--group-size", "4", "-o", "out"
        )
        assert result.exit_code == 2
        assert "--backend ray does not support --group-size" in result.output

    def test_dropped_singletons_are_refused(self, runner: CliRunner, tmp_path: Path) -> None:
        """Each part holds every row of its input: ``--singleton drop`` is refused before
        Ray starts (it ran into an internal error in the write tasks)."""
        result = run_cli(
            runner, "compute", "x.parquet", "--backend", "ray", "--singleton", "drop", "-o", "out"
        )
        assert result.exit_code == 2, result.output
        assert "--backend ray does not support --singleton drop" in result.output
        assert "Traceback" not in result.output

    def test_needs_an_output_folder_and_files(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "in.parquet"
        reward_log(rows=10).write_parquet(source)
        no_output = run_cli(runner, "compute", str(source), "--backend", "ray")
        assert no_output.exit_code == 2
        assert "give the folder with -o OUT_DIR" in no_output.output
        stdin = run_cli(runner, "compute", "-", "--backend", "ray", "-o", str(tmp_path / "o"))
        assert stdin.exit_code == 2
        assert "reads files, not standard input" in stdin.output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]

    def test_repeated_column_names_are_an_input_error(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        """A shard with two columns of one name (pyarrow writes them): exit 3 with the
        default engine's message, before Ray starts (it was DuplicateError, exit 70)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        paths = write_shards(reward_log(rows=20), tmp_path / "in", shards=2)
        columns = [pa.array(["p1", "p1"]), pa.array([1.0, 0.0]), pa.array([2.0, 3.0])]
        pq.write_table(pa.table(columns, names=["prompt_id", "reward", "reward"]), paths[1])
        assert_input_refused(
            runner, tmp_path, f"error: {paths[1]} has more than one column named 'reward'\n"
        )

    def test_ray_address_needs_backend_ray(self, runner: CliRunner) -> None:
        result = run_cli(runner, "compute", "x.parquet", "--ray-address", "auto")
        assert result.exit_code == 2
        assert "--ray-address is where --backend ray runs" in result.output

    def test_verify_refuses_ray(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "in.parquet"
        reward_log(rows=10).write_parquet(source)
        result = run_cli(runner, "verify", str(source), "--backend", "ray")
        assert result.exit_code == 2
        assert "verify reads the log on this machine: it does not take --backend ray" in (
            result.output
        )

    def test_unreachable_address(self, tmp_path: Path) -> None:
        """Nothing listens on the port: exit 4 at once, one line naming the address."""
        source = tmp_path / "in.parquet"
        reward_log(rows=10).write_parquet(source)
        port = _free_port()
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "grpo-adv"), "compute", str(source), "--backend", "ray",
             "--ray-address", f"127.0.0.1:{port}", "-o", str(tmp_path / "out")],
            capture_output=True, text=True, env=ENV, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert time.monotonic() - started < 60
        assert done.returncode == 4, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[0].startswith(f"error: cannot reach the Ray cluster at 127.0.0.1:{port}")
        assert lines[1:] == [
            "hint: check the address (ray status on the head node shows it); a cluster with "
            "token authentication (ray start with RAY_AUTH_MODE=token, or a token on the head) "
            "also needs its token here (RAY_AUTH_TOKEN or ~/.ray/auth_token); or drop "
            "--ray-address to run on a private local Ray"
        ]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_head(port: int, temp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ray start --head --block`` on ``port``, once its node is registered: ``ray start``
    prints "Ray runtime started." only after the raylet registered with the GCS. Its own
    session (the test kills the process group), its output in ``temp``."""
    said = temp / "ray-start.out"
    with said.open("wb") as out:
        head = subprocess.Popen(
            [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while b"Ray runtime started." not in said.read_bytes():
        assert head.poll() is None, said.read_text()
        assert time.monotonic() < deadline, "ray start --head did not start"
        time.sleep(0.05)
    return head


@pytest.fixture(scope="module")
def head_node() -> Iterator[dict[str, str]]:
    """A Ray cluster started with ``ray start --head --block`` on a free port (without
    token authentication, so that a plain client attaches), stopped afterwards by stopping
    that process (``ray stop`` would stop every Ray on the machine)."""
    port = _free_port()
    temp = _short_temp()  # Ray's Unix sockets live under it: never pytest's --basetemp
    head = _start_head(port, temp, {**ENV, "RAY_AUTH_MODE": "disabled"})
    try:
        yield {"gcs": f"127.0.0.1:{port}"}
    finally:
        head.terminate()
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def test_attaches_to_a_started_cluster(head_node: dict[str, str], tmp_path: Path) -> None:
    """``--ray-address HOST:PORT`` on a cluster started by ``ray start --head``: the same
    advantages as the Polars engine, and the run summary on stderr."""
    log = reward_log(rows=500)
    write_shards(log, tmp_path / "in", shards=3)
    out = tmp_path / "out"
    done = subprocess.run(
        [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
         "--ray-address", head_node["gcs"], "-e", "batch_std", "-o", str(out)],
        capture_output=True, text=True, env={**ENV, "RAY_AUTH_MODE": "disabled"}, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_same(read_parts(out), annotate(log, estimator="batch_std").frame)
    assert "500" in done.stderr and f"{out}/ (Parquet parts)" in done.stderr
    assert "Traceback" not in done.stderr and "WARNING" not in done.stderr


def test_ray_client_is_refused_with_the_way_that_works(runner: CliRunner, tmp_path: Path) -> None:
    """``ray://HOST:PORT`` (Ray Client) is refused before anything is read or started: the
    machine that runs grpo-adv makes and renames the output folder, so it must be one of
    the cluster's."""
    write_shards(reward_log(rows=50), tmp_path / "in", shards=1)
    out = tmp_path / "out"
    result = run_cli(
        runner, "compute", str(tmp_path / "in"), "--backend", "ray",
        "--ray-address", "ray://10.0.0.1:10001", "-o", str(out),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --ray-address ray://10.0.0.1:10001: Ray Client (ray://) is not supported",
        "hint: run grpo-adv on a machine of the cluster, with --ray-address auto or "
        "--ray-address HOST:PORT (the head's GCS address): the output folder is made and "
        "renamed where grpo-adv runs, so it must see the files the workers write",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# ------------------------------------------ where it runs, what it leaves, how it fails
def _short_temp() -> Path:
    """A system temporary folder for a private Ray that is short whatever pytest's
    ``--basetemp`` (Ray puts Unix sockets under it, at most 107 bytes)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="ga-"))


def _marked(folder: Path | None = None) -> list[int]:
    """Live processes of private Rays (of ``folder``'s, or of any): their environment
    names the folder, or they hold a file open in it (Ray's agents overwrite their
    environment's memory when they rename themselves, ``ray::DashboardAgent``)."""
    from grpo_cli.engines.ray_cluster import OWNER_ENV, TEMP_PREFIX

    wanted = f"{OWNER_ENV}={folder}".encode() if folder else f"{OWNER_ENV}=".encode()
    inside = f"{folder}/" if folder else f"/{TEMP_PREFIX}"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        named = any(e.startswith(wanted) if folder is None else e == wanted for e in environ)
        if state != "Z" and (named or _holds(entry, inside)):
            found.append(int(entry.name))
    return found


def _holding(inside: str) -> list[int]:
    """Live processes with a file open whose path holds ``inside``."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) != os.getpid() and _holds(entry, inside)
    ]


def _holds(process: Path, inside: str) -> bool:
    """Whether the process of ``/proc/PID`` has a file open whose path holds ``inside``."""
    with contextlib.suppress(OSError):
        for fd in (process / "fd").iterdir():
            with contextlib.suppress(OSError):
                if inside in str(fd.readlink()):
                    return True
    return False


def _private_env(temp: Path, home: Path) -> dict[str, str]:
    env = {
        **ENV,
        "TMPDIR": str(temp),
        "HOME": str(home),
        "RAY_ADDRESS": f"127.0.0.1:{_free_port()}",
    }
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_AUTH_TOKEN", None)
    return env


def _private_script(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c script args`` as a user's process with a private Ray would run: its own
    short temporary folder (removed after) and home, no cluster followed."""
    temp, home = _short_temp(), tmp_path / "home"
    home.mkdir()
    try:
        return subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True,
            env=_private_env(temp, home), timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_private_ray_follows_no_other_cluster(tmp_path: Path) -> None:
    """No --ray-address: a private local Ray, although RAY_ADDRESS names a dead address and
    the machine's last ``ray start`` (``$TMPDIR/ray/ray_current_cluster``) is stale; one
    note says so; nothing on stdout; its temporary folder, its processes and any token
    file are gone with the run."""
    temp, home = _short_temp(), tmp_path / "home"
    home.mkdir()
    (temp / "ray").mkdir()
    (temp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
    log = reward_log(rows=300)
    write_shards(log, tmp_path / "in", shards=2)
    out = tmp_path / "out"
    started = time.monotonic()
    done = subprocess.run(
        [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
         "-o", str(out)],
        capture_output=True, text=True, env=_private_env(temp, home), timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "note: running on a private local Ray, started for this run (RAY_ADDRESS=" in (
        done.stderr
    )
    assert "is not followed: --ray-address auto joins that cluster" in done.stderr
    assert_same(read_parts(out), annotate(log).frame)
    assert sorted(p.name for p in temp.iterdir()) == ["ray"]  # Ray's own file, untouched
    assert list(home.iterdir()) == []  # no ~/.ray/auth_token written
    assert elapsed < 240
    shutil.rmtree(temp)


@pytest.mark.parametrize(
    ("sig", "code", "inherited"),
    [
        (signal.SIGINT, 130, signal.SIG_DFL),
        (signal.SIGTERM, 143, signal.SIG_DFL),
        (signal.SIGINT, 130, signal.SIG_IGN),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"],
)
def test_interrupted_private_run_leaves_nothing(
    tmp_path: Path, sig: int, code: int, inherited: signal.Handlers
) -> None:
    """Ctrl-C or SIGTERM while the private Ray starts (``ray.init`` installs its own
    SIGTERM handler): exit 130 or 143 with the one-line message, no staging folder, no
    Ray process, no temporary folder; also where SIGINT was inherited as ignored (a
    script's background job: the run went on to exit 0). (A log that takes seconds: the
    signal lands while the run lasts whenever it comes, the start taking about a second.)"""
    temp, home = _short_temp(), tmp_path / "home"
    home.mkdir()
    write_shards(reward_log(rows=2_000_000), tmp_path / "in", shards=4)
    run = subprocess.Popen(
        [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
         "-o", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_private_env(temp, home),
        stdin=subprocess.DEVNULL, preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),
    )  # fmt: skip
    folder = _wait_for_private_ray(temp, run)
    run.send_signal(sig)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == code, stderr
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert stderr.splitlines()[-1] == f"error: {word}; no output was written"
    assert stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "in"]
    assert not folder.exists()
    assert _marked(folder) == []
    shutil.rmtree(temp)


def _wait_for_private_ray(temp: Path, run: subprocess.Popen[Any]) -> Path:
    """The private Ray's folder, once its first processes run."""
    deadline = time.monotonic() + 120
    while True:
        assert run.poll() is None, run.communicate()
        folders = list(temp.glob("grpo-adv-ray.*"))
        if folders and _marked(folders[0]):
            return folders[0]
        assert time.monotonic() < deadline, "the private Ray did not start"
        time.sleep(0.2)


def _wait_for_tasks(folder: Path, run: subprocess.Popen[Any], *, private: bool = True) -> None:
    """Until a worker of the Ray of ``folder`` (a private Ray's, or with ``private=False``
    the ``--temp-dir`` of a ``ray start``, whose workers hold their logs open in it) runs one
    of the engine's tasks (its process title ``ray::TASK``)."""
    deadline = time.monotonic() + 120
    while True:
        assert run.poll() is None, run.communicate()
        for pid in _marked(folder) if private else _holding(f"{folder}/"):
            with contextlib.suppress(OSError):
                title = (Path("/proc") / str(pid) / "cmdline").read_bytes()
                if re.match(rb"ray::(split_pieces|compute_partition|write_pieces)", title):
                    return
        assert time.monotonic() < deadline, "no task ran"
        time.sleep(0.05)


def test_private_ray_dies_with_its_command(tmp_path: Path) -> None:
    """``kill -9`` of the command: its watcher stops every process of the private Ray
    (its agents too, ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``, which lived
    on for 60 s) and removes its folder within seconds."""
    temp, home = _short_temp(), tmp_path / "home"
    home.mkdir()
    write_shards(reward_log(rows=4_000_000), tmp_path / "in", shards=4)  # seconds of work
    run = subprocess.Popen(
        [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
         "-o", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_private_env(temp, home),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    folder = _wait_for_private_ray(temp, run)
    _wait_for_tasks(folder, run)  # Ray's processes all there, its workers at work
    run.kill()
    run.wait()
    deadline = time.monotonic() + 20
    while (folder.exists() or _marked(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked(folder) == []
    assert not folder.exists()
    shutil.rmtree(temp)


STUCK_SCRIPT = """
import os, sys
from pathlib import Path
from grpo_cli.engines import ray_cluster as rc
staging = Path(sys.argv[1])
staging.mkdir()
with rc._private(lambda note: None, [staging]):
    folder = Path(os.environ[rc.OWNER_ENV])
    print(folder, flush=True)
    (folder / "ray" / "session_x").mkdir(parents=True)  # Ray's start began, no head runs
    sum(range(10**12))  # the interpreter held, as Ray's core holds it then
"""


def test_a_run_stuck_in_ray_after_its_head_died_is_ended_with_one_line(tmp_path: Path) -> None:
    """The private Ray's head (GCS) killed while Ray's core starts in the driver: Ray
    holds the interpreter, then ends the process 60 s later with exit 1, no message and
    the staging folder left. The reaper sees the head gone and the heartbeats stopped:
    within seconds, the one error line on the command's stderr, the staging folder and
    the Ray folder removed, the command ended (SIGKILL: Ray's core cannot be left)."""
    temp, staging = _short_temp(), tmp_path / ".out.part"
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", STUCK_SCRIPT, str(staging)], capture_output=True, text=True,
        env={**ENV, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 20
    assert run.stderr.splitlines() == [
        "error: lost a private local Ray: its head stopped answering for 5 s; nothing was written",
        "hint: run again (its head process was killed or ran out of memory), or use the default "
        "engine",
    ]
    assert not staging.exists()
    folder = Path(run.stdout.strip())
    deadline = time.monotonic() + 10
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not folder.exists()
    shutil.rmtree(temp)


HEAD_LOST_SCRIPT = """
import os, subprocess, sys, time, types
from pathlib import Path
from grpo_cli.engines import ray_cluster as rc
staging, said = Path(sys.argv[1]), Path(sys.argv[2])
staging.mkdir()


def init(**kwargs):  # Ray's start, waiting for its head's port (the interpreter free)
    head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gcs_server"])
    time.sleep(1)  # the head runs a second (the watcher looks 4 times a second)
    said.write_text(f"{head.pid} {os.environ[rc.OWNER_ENV]}")
    time.sleep(60)


fake = types.ModuleType("ray")
fake.is_initialized, fake.init, fake.shutdown = (lambda: False), init, (lambda: None)
sys.modules["ray"] = fake
with rc.session(None, notes=lambda note: None, staging=[staging]):
    pass
"""


def test_a_private_ray_whose_head_died_while_it_starts_is_ended_at_once(tmp_path: Path) -> None:
    """The private Ray's head process (GCS) gone while Ray's start waits for it (Ray
    waited 30 s for its port, then blamed the machine's memory): 2 s later, the one
    error line, the staging folder removed, exit 4, the Ray folder removed."""
    temp, staging, said = _short_temp(), tmp_path / ".out.part", tmp_path / "head"
    run = subprocess.Popen(
        [sys.executable, "-c", HEAD_LOST_SCRIPT, str(staging), str(said)],
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env={**ENV, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not said.exists() or not said.read_text():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    pid, folder = said.read_text().split()
    killed = time.monotonic()
    os.kill(int(pid), signal.SIGKILL)
    _, stderr = run.communicate(timeout=60)
    assert (run.returncode, stderr.splitlines()) == (
        4,
        [
            "error: lost a private local Ray: its head stopped answering for 2 s; nothing "
            "was written",
            "hint: run again (its head process was killed or ran out of memory), or use the "
            "default engine",
        ],
    )
    assert time.monotonic() - killed < 10
    assert not staging.exists()
    deadline = time.monotonic() + 10
    while Path(folder).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(folder).exists()
    shutil.rmtree(temp)


def test_leftovers_of_a_killed_watcher_are_reaped(tmp_path: Path) -> None:
    """The next run reaps a private Ray whose command and watcher were both killed: its
    processes (found by the folder in their environment) and its folder; a live owner's
    folder and a folder without an owner file are left alone."""
    from grpo_cli.engines.ray_cluster import OWNER_ENV, TEMP_PREFIX, reap_leftovers
    from grpo_cli.io.temporaries import owner_tag

    temp = _short_temp()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live, unowned = (temp / f"{TEMP_PREFIX}{n}" for n in ("a", "b", "c"))
    for folder in (stale, live, unowned):
        folder.mkdir()
    (stale / "owner").write_text(owner_tag().replace(f".{os.getpid()}@", f".{dead.pid}@"))
    (live / "owner").write_text(owner_tag())
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**ENV, OWNER_ENV: str(stale)}
    )
    # a leftover has long run its program: wait until the new process has (until its exec,
    # a forked child still shows this process's environment, without the marker)
    marker = f"{OWNER_ENV}={stale}".encode()
    deadline = time.monotonic() + 60
    while marker not in Path(f"/proc/{orphan.pid}/environ").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, "the orphan never started"
        time.sleep(0.01)
    try:
        old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(temp)
        import tempfile

        tempfile.tempdir = None
        removed = reap_leftovers()
    finally:
        if old is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
    assert removed == [stale]
    assert orphan.wait(timeout=10) == -signal.SIGKILL
    assert sorted(p.name for p in temp.iterdir()) == [live.name, unowned.name]
    shutil.rmtree(temp)


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("shard", [0, 2])
@pytest.mark.parametrize(
    "damage", ["truncated", "corrupt_pages", "empty", "csv", "cut_footer_kept"]
)
def test_unreadable_parquet_shard_is_an_input_error(
    runner: CliRunner, tmp_path: Path, damage: str, shard: int
) -> None:
    """A damaged Parquet shard, the first (checked before Ray starts) or not (read by a
    task): exit 3 naming it with the default engine's very message and hint (the cause in
    plain text, no colour codes), no internal error, nothing written."""
    write_shards(reward_log(rows=300), tmp_path / "in", shards=3)
    bad = tmp_path / "in" / f"shard-{shard}.parquet"
    data = bad.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "cut_footer_kept":
        bad.write_bytes(_cut_with_footer(data))
    elif damage == "corrupt_pages":
        pages = bytearray(data)
        for i in range(100, len(pages) - 600):
            pages[i] = (pages[i] * 7 + 13) % 256
        bad.write_bytes(bytes(pages))
    else:
        bad.write_bytes(b"" if damage == "empty" else b"prompt_id,reward\np1,1\n")
    out = str(tmp_path / "out")
    result = run_cli(runner, "compute", str(tmp_path / "in"), "--backend", "ray", "-o", out)
    assert result.exit_code == 3, result.output
    expected = {
        "truncated": f"{bad} is not a complete Parquet file (no PAR1 footer: truncated?)",
        "corrupt_pages": f"cannot read {bad} as parquet: its footer is not Parquet metadata",
        "empty": f"{bad} is empty",
        "csv": f"{bad} is not Parquet (it looks like CSV text)",
        "cut_footer_kept": f"cannot read {bad} as parquet: row group 0, column ",
    }
    assert result.output.splitlines()[0].startswith("error: " + expected[damage])
    default = run_cli(runner, "compute", str(tmp_path / "in"), "-o", out)
    assert (default.exit_code, default.output) == (3, result.output)
    assert "\x1b" not in result.output and "internal error" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("kind", ["empty", "random_bytes", "gzip_compressed"])
def test_a_parquet_name_that_is_not_plain_parquet_is_read_as_the_polars_engine_reads_it(
    runner: CliRunner, tmp_path: Path, kind: str
) -> None:
    """An empty or random-bytes ``.parquet`` and a ``.parquet.gz``, first input or not:
    the Polars engine's exit code and message (3, 3; the Ray engine named --low-memory,
    which nobody passed), and the same advantages for the compressed file (exit 0)."""
    log = reward_log(rows=300)
    good = write_shards(log.slice(0, 150), tmp_path / "in", shards=1)[0]
    name = tmp_path / "in" / ("b.parquet.gz" if kind == "gzip_compressed" else "b.parquet")
    if kind == "empty":
        name.write_bytes(b"")
    elif kind == "random_bytes":
        name.write_bytes(np.random.default_rng(1).bytes(5000))
    else:
        buffer = io.BytesIO()
        log.slice(150).write_parquet(buffer)
        name.write_bytes(gzip.compress(buffer.getvalue()))
    for inputs in ([name], [good, name]):
        given = [str(p) for p in inputs]
        polars = run_cli(runner, "compute", *given, "-o", str(tmp_path / "polars.parquet"))
        ray_run = run_cli(
            runner, "compute", *given, "--backend", "ray", "-o", str(tmp_path / "ray")
        )
        assert ray_run.exit_code == polars.exit_code == (0 if kind == "gzip_compressed" else 3)
        if polars.exit_code:
            assert ray_run.stderr == polars.stderr
            assert "--low-memory" not in ray_run.stderr
            continue
        assert_same(read_parts(tmp_path / "ray"), pl.read_parquet(tmp_path / "polars.parquet"))
        shutil.rmtree(tmp_path / "ray")
        (tmp_path / "polars.parquet").unlink()


def test_trl_dump_is_refused_once_with_the_route_that_works(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A TRL completions log's groups are positional: refused before Ray starts, pointing
    at the default engine (which infers num_generations), not at --group-size."""
    source = Path(__file__).parent.parent / "sample_data" / "trl_completions"
    result = run_cli(
        runner, "compute", str(source), "--preset", "trl", "--backend", "ray",
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "error: --backend ray does not support a TRL completions log (its groups are "
        "num_generations consecutive rows, which need the rows in order)",
        "hint: drop --backend ray: the default engine infers num_generations from the log",
    ]
    assert list(tmp_path.iterdir()) == []


def test_head_killed_mid_run_with_the_users_token(tmp_path: Path) -> None:
    """A ``ray start`` cluster with token authentication (its default): without
    ``RAY_AUTH_MODE=token``, Ray's refusal is one line saying what to export (exit 4);
    with it, the user's token (``~/.ray/auth_token``) is used; the head killed mid-run:
    exit 4 within seconds, one ``error:`` line naming the lost cluster, no Ray log lines,
    nothing on stdout, no staging folder."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))  # the user's token
    port, head_temp = _free_port(), _short_temp()
    env = {**ENV, "HOME": str(home)}
    env.pop("RAY_AUTH_MODE", None)
    head = _start_head(port, head_temp, env)
    try:
        write_shards(reward_log(rows=4_000_000), tmp_path / "in", shards=4)  # 2-3 s of work
        out = tmp_path / "out"
        refused = subprocess.run(
            [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
             "--ray-address", f"127.0.0.1:{port}", "-o", str(out)],
            capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert refused.returncode == 4, refused.stderr
        assert refused.stderr.splitlines() == [
            f"note: running on the Ray cluster at 127.0.0.1:{port}",
            f"error: cannot attach to the Ray cluster at 127.0.0.1:{port}: it asks for an "
            "authentication token; nothing was written",
            "hint: export RAY_AUTH_MODE=token (the token is read from RAY_AUTH_TOKEN or "
            "~/.ray/auth_token), or drop --ray-address to run on a private local Ray",
        ]
        env["RAY_AUTH_MODE"] = "token"
        run = subprocess.Popen(
            [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
             "--ray-address", f"127.0.0.1:{port}", "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        # Mid-run: the driver attached (a head killed while a driver registers ends it in
        # Ray's C++ with exit 1, before any Python runs) and its tasks running.
        _wait_for_tasks(head_temp, run, private=False)
        os.killpg(head.pid, signal.SIGKILL)
        killed = time.monotonic()
        stdout, stderr = run.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(head_temp, ignore_errors=True)
    assert run.returncode == 4, stderr
    assert time.monotonic() - killed < 40
    assert stdout == ""
    assert stderr.splitlines() == [
        f"note: running on the Ray cluster at 127.0.0.1:{port}",
        f"error: lost the Ray cluster at 127.0.0.1:{port}: its head stopped answering for "
        "10 s; nothing was written",
        "hint: check the cluster (ray status on the head node), then run again",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "in"]


# ------------------------------------------------ the narrow shuffle: parts, names, bytes moved
@pytest.mark.usefixtures("local_ray")
class TestNarrowShuffle:
    def test_out_dir_mirrors_the_inputs_in_their_order(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One part per input file, named after it (its folder kept: a/ and b/ hold files of
        the same name), a large Parquet file in fixed row ranges; every part holds its
        input's rows in their order, every column, and the advantages the Polars engine
        gives the whole log."""
        from grpo_cli import run_job
        from grpo_cli.engines import ray as engine

        monkeypatch.setattr(engine, "PIECE_ROWS", 250)  # the driver cuts the pieces
        log = reward_log(rows=1200).with_columns(pl.col("rid").cast(pl.Int64))
        inputs = tmp_path / "in"
        (inputs / "a").mkdir(parents=True)
        (inputs / "b").mkdir()
        log.slice(0, 200).write_parquet(inputs / "a" / "x.parquet")
        log.slice(200, 100).write_parquet(inputs / "b" / "x.parquet")
        log.slice(300, 900).write_parquet(inputs / "big.parquet", row_group_size=100)
        out = tmp_path / "out"
        files = [inputs / "a" / "x.parquet", inputs / "b" / "x.parquet", inputs / "big.parquet"]
        run_job(files, out, engine={"backend": "ray"})
        names = sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))
        ranges = [f"big-{k:05d}.parquet" for k in range(4)]
        assert names == ["a/x.parquet", "b/x.parquet", *ranges]
        expected = annotate(log).frame
        parts = [("a/x.parquet", 0, 200), ("b/x.parquet", 200, 100)]
        parts += [(name, 300 + 250 * k, min(250, 900 - 250 * k)) for k, name in enumerate(ranges)]
        for name, offset, rows in parts:
            part = pl.read_parquet(out / name)
            assert part.columns == expected.columns
            assert part["rid"].to_list() == list(range(offset, offset + rows)), name
            assert_same(part, expected.slice(offset, rows))

    def test_parts_are_named_after_the_paths_given_not_their_link_targets(
        self, tmp_path: Path
    ) -> None:
        """A Hugging Face snapshot's files are links to blobs named by their hashes: the
        parts take the links' names."""
        from grpo_cli import run_job

        log = reward_log(rows=400)
        blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "r1"
        blobs.mkdir()
        snapshot.mkdir(parents=True)
        for k in range(2):
            log.slice(200 * k, 200).write_parquet(blobs / f"{k}f3a9c")
            (snapshot / f"step_{k}.parquet").symlink_to(blobs / f"{k}f3a9c")
        out = tmp_path / "out"
        run_job([snapshot], out, engine={"backend": "ray"})
        assert sorted(p.name for p in out.iterdir()) == ["step_0.parquet", "step_1.parquet"]
        assert_same(read_parts(out), annotate(log).frame)

    def test_a_range_and_an_input_of_the_same_part_name_are_refused(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``x.parquet``'s second range would be ``x-00001.parquet``, an input's name too:
        refused before Ray starts (one part would have replaced the other's rows)."""
        from grpo_cli.engines import ray as engine

        monkeypatch.setattr(engine, "PIECE_ROWS", 250)
        log = reward_log(rows=600)
        inputs = tmp_path / "in"
        inputs.mkdir()
        log.slice(0, 500).write_parquet(inputs / "x.parquet")
        log.slice(500, 100).write_parquet(inputs / "x-00001.parquet")
        result = run_cli(
            runner, "compute", str(inputs), "--backend", "ray", "-o", str(tmp_path / "out")
        )
        assert result.exit_code == 2, result.output
        assert "would both be written as the part x-00001.parquet" in result.output
        assert "hint: rename one of them" in result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]

    def test_a_key_typed_differently_in_two_files_is_one_key(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        """``7`` in one file and ``"7"`` in another are one prompt, as the one-machine path
        reads the files as one log (their supertype, text); the step an Int32 in one file
        and an Int64 in the other is one batch (batch_std per step)."""
        log = reward_log(rows=600).with_columns(
            pl.col("prompt_id").str.slice(1).cast(pl.Int64).cast(pl.String)  # "p007" -> "7"
        )
        inputs = tmp_path / "in"
        inputs.mkdir()
        first = log.slice(0, 300).with_columns(
            pl.col("prompt_id").cast(pl.Int64), pl.col("step").cast(pl.Int32)
        )
        first.write_parquet(inputs / "a.parquet")
        log.slice(300, 300).write_parquet(inputs / "b.parquet")
        args = ["-e", "batch_std", "--batch-col", "step", "-g", "step", "-g", "prompt_id"]
        ray_out, one_out = tmp_path / "ray", tmp_path / "one.parquet"
        done = run_cli(
            runner, "compute", str(inputs), "--backend", "ray", "-o", str(ray_out), *args
        )
        assert done.exit_code == 0, done.output
        one = run_cli(runner, "compute", str(inputs), "-o", str(one_out), *args)
        assert one.exit_code == 0, one.output
        expected = pl.read_parquet(one_out)
        got = pl.concat(
            [pl.read_parquet(ray_out / f"{n}.parquet") for n in "ab"], how="vertical_relaxed"
        )
        assert got["rid"].to_list() == expected["rid"].to_list()
        diff = (got["advantage"] - expected["advantage"]).abs().max()
        assert diff is not None and float(diff) <= 1e-12  # type: ignore[arg-type]
        # the groups really span both files: pooled within a file they would differ
        shared = set(first["prompt_id"].cast(pl.String)) & set(log.slice(300, 300)["prompt_id"])
        assert len(shared) > 50

    def test_only_what_the_formula_reads_is_shuffled(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A log with 1 KB of text a row: 32 bytes a row go to the partitions (two key
        hashes, the reward, the locator) and about 16 come back (the locator's row, the
        advantage), as the engine's log line counts them (Arrow sizes of what the tasks
        send); the parts still hold the text, unchanged."""
        import logging

        from grpo_cli import run_job

        log = reward_log(rows=2000).with_columns(
            pl.format("{}{}", pl.col("completion"), pl.lit("x" * 1000)).alias("completion")
        )
        write_shards(log, tmp_path / "in", shards=4)
        out = tmp_path / "out"
        with caplog.at_level(logging.INFO, logger="grpo_cli.engines.ray"):
            run_job([tmp_path / "in"], out, engine={"backend": "ray"})
        line = next(r.getMessage() for r in caplog.records if "shuffled" in r.getMessage())
        sent, back = (float(x) for x in re.findall(r"\(([\d.]+) a row\)", line))
        assert 32 <= sent <= 34, line  # 4 x 8 bytes, and validity bitmaps
        assert 16 <= back <= 18, line
        assert_same(read_parts(out), annotate(log).frame)

    def test_a_hash_collision_starts_again_on_the_exact_key(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every key forced onto one group hash (their check hashes differ) in the map tasks:
        a partition sees the collision, and the run starts again with the key's columns
        moved: the advantages are still the Polars engine's."""
        from ray import cloudpickle

        from grpo_cli.engines import ray_tasks

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
        monkeypatch.setattr(ray_tasks, "hashed_key", _clashing_hash)
        log = reward_log(rows=600)
        write_shards(log, tmp_path / "in", shards=3)
        out = tmp_path / "out"
        from grpo_cli import run_job

        run_job([tmp_path / "in"], out, options={"estimator": "rloo"}, engine={"backend": "ray"})
        assert_same(read_parts(out), annotate(log, estimator="rloo").frame)


def _clashing_hash(key_cols: Any) -> list[pl.Expr]:
    """GROUP the same for every key; CHECK the real second hash."""
    from grpo_cli.engines.narrow import CHECK, GROUP

    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    return [pl.lit(7, dtype=pl.UInt64).alias(GROUP), key.hash(seed=1).alias(CHECK)]


NEEDS = {"length": ("length_col", "length"), "baseline": ("baseline_col", "baseline")}


def _columns(estimator: str, options: dict[str, Any]) -> dict[str, Any]:
    from grpo_cli.core.estimators import ESTIMATORS

    needs = set(ESTIMATORS[estimator].needs) | (
        {"length"} if options.get("token_weighted") else set()
    )
    return dict(NEEDS[n] for n in needs)


@pytest.mark.usefixtures("local_ray")
def test_every_estimator_and_preset_as_the_polars_engine(tmp_path: Path) -> None:
    """Every response-level estimator (batch-level ones included) and every preset, on a log
    in three shards: each part equals the Polars engine's rows of that shard to 1e-12, in
    order (one run per method, on one embedded Ray)."""
    from grpo_cli import run_job
    from grpo_cli.core.estimators import ESTIMATORS
    from grpo_cli.core.presets import PRESETS

    log = reward_log(rows=600).with_columns(
        (pl.col("rid") % 7 / 8.0).alias("baseline"), pl.col("rid").cast(pl.Int64)
    )
    write_shards(log, tmp_path / "in", shards=3)
    runs: list[tuple[str, str | None, dict[str, Any]]] = [
        (e, None, {"estimator": e, **_columns(e, {})}) for e in ESTIMATORS if e != "process"
    ]
    runs += [
        (p, p, _columns(str(known.options.get("estimator", "grpo")), dict(known.options)))
        for p, known in PRESETS.items()
    ]
    for k, (name, preset, options) in enumerate(runs):
        out = tmp_path / f"out{k}"
        run_job([tmp_path / "in"], out, preset=preset, options=options, engine={"backend": "ray"})
        expected = annotate(log, preset, **options).frame
        for shard in range(3):
            part = pl.read_parquet(out / f"shard-{shard}.parquet")
            assert_same(part, expected.filter(pl.col("rid").is_in(part["rid"].implode())))
            assert part["rid"].is_sorted(), name
    assert len(runs) == 14 + len(PRESETS)


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(
    "preset", ["nemo-rl", "nemo-rl-gdpo", "areal", "skyrl-maxrl", "openrlhf-flash-reinforce"]
)
def test_trainer_presets_reproduce_their_trainer(tmp_path: Path, preset: str) -> None:
    """A leave-one-out std, GDPO over sorted reward columns, a reward clip and token
    whitening, maxrl, a batch baseline: the trainer's own code (tests/trainer_reference.py)
    to float32 rounding, on a log of three steps in three shards."""
    from grpo_cli import run_job
    from tests.test_presets_trainers import CASES, TOL, expected, trainer_log, worst

    rewards, reference, extra = CASES[preset]
    log = trainer_log(11, 4, rewards).with_row_index("rid")
    write_shards(log, tmp_path / "in", shards=3)
    options = {"batch_col": "step", "length_col": "length", **extra}
    run_job(
        [tmp_path / "in"],
        tmp_path / "out",
        preset=preset,
        options=options,
        engine={"backend": "ray"},
    )
    got = read_parts(tmp_path / "out")["advantage"].to_list()
    assert worst(got, expected(log, reference, 4)) <= TOL


@pytest.mark.usefixtures("local_ray")
def test_a_file_named_with_glob_characters_is_read_as_named(tmp_path: Path) -> None:
    """``shard[1].parquet`` is a file's name, not a pattern (Polars' scans take a path as a
    glob by default and found no file: an internal error, exit 70): its part has its name
    and the default engine's rows."""
    from grpo_cli import run_job

    log = reward_log(rows=300)
    (tmp_path / "in").mkdir()
    log.write_parquet(tmp_path / "in" / "shard[1].parquet")
    out = tmp_path / "out"
    run_job([tmp_path / "in"], out, engine={"backend": "ray"})
    assert [p.name for p in out.iterdir()] == ["shard[1].parquet"]
    part = pl.read_parquet(out / "shard[1].parquet", glob=False)
    assert_same(part, annotate(log).frame)


def test_small_pieces_go_in_batches_that_keep_every_core_busy(tmp_path: Path) -> None:
    """16 files of 625k rows on 2 cores: 4 batches of 4 (two a core); a file of 300 MB is a
    batch alone (BATCH_BYTES); a log of 3 tiny files is one batch."""
    from grpo_cli.engines.ray import _batches
    from grpo_cli.engines.ray_tasks import Piece

    def piece(k: int, rows: int, size: int) -> Piece:
        return Piece(k, str(tmp_path / f"{k}.parquet"), "parquet", 0, rows, f"{k}.parquet", size)

    shards = [piece(k, 625_000, 5 << 20) for k in range(16)]
    assert [len(b) for b in _batches(shards, cpus=2)] == [4, 4, 4, 4]
    heavy = [piece(0, 1000, 1 << 20), piece(1, 1000, 300 << 20), piece(2, 1000, 1 << 20)]
    assert [[p.index for p in b] for b in _batches(heavy, cpus=1)] == [[0], [1], [2]]
    tiny = [piece(k, 100, 4096) for k in range(3)]
    assert [len(b) for b in _batches(tiny, cpus=2)] == [3]


def test_a_private_ray_that_fails_to_start_is_one_line_exit_4() -> None:
    """Ray's start raises a plain Exception for a raylet that never registers (``The
    current node timed out during startup...``): exit 4 with its first sentence, saying a
    private Ray did not start (not an address to check)."""
    from types import SimpleNamespace

    from grpo_cli.core.errors import ClusterError, keyword_spelling
    from grpo_cli.engines import ray_cluster

    def init(**_: Any) -> None:
        raise Exception(
            "The current node timed out during startup. This could happen because some "
            "of the raylet failed to startup or the GCS has become overloaded."
        )

    failing = SimpleNamespace(init=init, shutdown=lambda: None)
    where = ray_cluster._Where("a private local Ray", None, "local")
    with pytest.raises(ClusterError) as caught:
        ray_cluster._init(failing, where, 2, [], None)
    message, hint = caught.value.render(keyword_spelling)
    assert message == (
        "cannot start a private local Ray: The current node timed out during startup; "
        "nothing was written"
    )
    assert hint is not None
    assert hint.startswith("Ray could not start its processes on this machine")
    assert caught.value.exit_code == 4


def test_a_long_temporary_folder_still_starts_a_private_ray(tmp_path: Path) -> None:
    """A ``$TMPDIR`` too long for the Unix sockets Ray puts in its folder (AF_UNIX: 107
    bytes; here 60 characters) sends the private Ray's folder to /tmp (it was exit 4,
    "AF_UNIX path length cannot exceed 107 bytes", with a hint blaming memory); removed
    at the end as usual."""
    from grpo_cli.engines.ray_cluster import TEMP_PREFIX

    temp = _short_temp()
    long_temp = temp / ("t" * (60 - len(str(temp)) - 1))
    long_temp.mkdir()
    assert len(str(long_temp)) == 60
    (tmp_path / "home").mkdir()
    write_shards(reward_log(rows=300), tmp_path / "in", shards=2)
    before = set(Path("/tmp").glob(f"{TEMP_PREFIX}*"))
    done = subprocess.run(
        [str(BIN / "grpo-adv"), "compute", str(tmp_path / "in"), "--backend", "ray",
         "-o", str(tmp_path / "out"), "-q"],
        capture_output=True, text=True, env=_private_env(long_temp, tmp_path / "home"),
        timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert read_parts(tmp_path / "out").height == 300
    assert list(long_temp.iterdir()) == []
    assert set(Path("/tmp").glob(f"{TEMP_PREFIX}*")) <= before
    shutil.rmtree(temp)


def test_a_socket_path_too_long_is_said() -> None:
    """Where Ray's socket paths still exceed 107 bytes, the message says so and how to
    fix it (the hint blamed memory and /dev/shm)."""
    from types import SimpleNamespace

    from grpo_cli.core.errors import ClusterError, keyword_spelling
    from grpo_cli.engines import ray_cluster

    def init(**_: Any) -> None:
        raise Exception(
            "validate_socket_filename failed: AF_UNIX path length cannot exceed 107 bytes: "
            "/very/long/session_x/sockets/plasma_store"
        )

    failing = SimpleNamespace(init=init, shutdown=lambda: None)
    where = ray_cluster._Where("a private local Ray", None, "local")
    with pytest.raises(ClusterError) as caught:
        ray_cluster._init(failing, where, 2, [], None)
    _, hint = caught.value.render(keyword_spelling)
    assert hint == (
        f"Ray's socket paths in its folder under {ray_cluster._folder_parent()} exceed 107 "
        "bytes: set TMPDIR to a shorter folder; or give ray_address to run on a Ray "
        "cluster already running"
    )
    assert caught.value.exit_code == 4


LAST_WORDS_SCRIPT = """
import sys
from pathlib import Path
from grpo_cli.cli.params import flag_spelling
from grpo_cli.cli.render import print_error, stderr_console
from grpo_cli.engines import ray_cluster as rc
staging, reader = Path(sys.argv[1]), sys.argv[2]
staging.mkdir()
console = stderr_console()
with rc._silenced() as real_stderr:
    print("Ray's own noise", file=sys.stderr)
    error = rc._unreachable(rc.PRIVATE_NAME, "no answer within 50 s", private=True)
    fatal = (lambda e: print_error(console, e, flag_spelling)) if reader == "cli" else None
    rc._end_now(real_stderr, error, [staging], fatal)
"""


@pytest.mark.parametrize(("reader", "named"), [("cli", "--ray-address"), ("python", "ray_address")])
def test_the_last_words_of_a_run_ended_at_once_are_the_callers_to_spell(
    tmp_path: Path, reader: str, named: str
) -> None:
    """When Ray holds the main thread (no answer from its start, the cluster lost), the
    engine ends the process itself: its error goes, as structure, to the caller's
    ``fatal`` callback (the command line names options by their flags), with the real
    standard error back in place; exit 4 and the staging folder removed."""
    staging = tmp_path / ".out.part"
    run = subprocess.run(
        [sys.executable, "-c", LAST_WORDS_SCRIPT, str(staging), reader],
        capture_output=True, text=True, env={**ENV, "PYTHONPATH": str(ROOT)},
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 4
    assert run.stderr.splitlines() == [
        "error: cannot start a private local Ray: no answer within 50 s; nothing was written",
        "hint: Ray could not start its processes on this machine (check its free memory and "
        f"/dev/shm); or give {named} to run on a Ray cluster already running",
    ]
    assert not staging.exists()


EXIT_SCRIPT = """
import atexit, sys
marker = sys.argv[1]
atexit.register(lambda: open(marker, "w").write("the interpreter's teardown ran"))
if sys.argv[2] == "embedded":
    import ray
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
sys.argv = ["grpo-adv", *sys.argv[3:]]
from grpo_cli.cli.app import main
main()
"""


@pytest.mark.parametrize("ray_at_exit", ["stopped", "embedded"])
def test_a_ray_run_ends_at_once_unless_ray_still_runs(tmp_path: Path, ray_at_exit: str) -> None:
    """The command's own Ray is stopped when it ends: the process then exits at once
    (``os._exit``, no interpreter teardown: 0.3 s with Ray loaded), every part written;
    a Ray still running in the process (started by the caller) keeps Python's exit, whose
    handlers stop it."""
    write_shards(reward_log(rows=200), tmp_path / "in", shards=2)
    marker, out = tmp_path / "teardown", tmp_path / "out"
    args = ["compute", str(tmp_path / "in"), "--backend", "ray", "-o", str(out), "-q"]
    done = _private_script(tmp_path, EXIT_SCRIPT, str(marker), ray_at_exit, *args)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["shard-0.parquet", "shard-1.parquet"]
    assert pl.read_parquet(out / "*.parquet").height == 200
    assert marker.exists() is (ray_at_exit == "embedded")


def test_a_private_ray_store_fits_the_container_and_its_shared_memory() -> None:
    """Half the memory (a container's limit when lower) within 90% of /dev/shm's free
    space; below 1 GiB (Docker's 64 MiB /dev/shm) Ray's own default decides, which falls
    back to a file rather than refuse to start below 75 MiB."""
    from grpo_cli.engines.ray_cluster import object_store_bytes

    gib = 1 << 30
    assert object_store_bytes(24 * gib, None, 24 * gib) == 12 * gib
    assert object_store_bytes(64 * gib, 8 * gib, 64 * gib) == 4 * gib  # the container's
    assert object_store_bytes(64 * gib, 2**63 - 4096, 64 * gib) == 32 * gib  # no limit (v1)
    assert object_store_bytes(64 * gib, None, 10 * gib) == 9 * gib
    assert object_store_bytes(64 * gib, None, 64 << 20) is None  # Docker's default /dev/shm


PRIVATE_RAY = re.compile(r"\bray\.(_\w+|core\.generated)|\b_(temp_dir|system_config)\b|grpc")


def test_grpo_adv_uses_only_public_ray_names() -> None:
    """No module of grpo_cli names Ray's private modules (``ray._private``, ``ray._raylet``,
    ``ray.core.generated``, imported or as a string), ``ray.init``'s underscored options
    or gRPC: a Ray release cannot turn them into silent no-ops or failures."""
    assert PRIVATE_RAY.findall('importlib.import_module("ray._raylet")')
    assert PRIVATE_RAY.findall("from ray.core.generated import gcs_pb2")
    assert PRIVATE_RAY.findall('extra["_system_config"] = {}')
    found = {
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "grpo_cli").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_RAY.search(line)
    }
    assert found == set()

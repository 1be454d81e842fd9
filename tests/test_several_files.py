"""Several inputs: one log by default, one annotated file per input with --out-dir; and the
progress display."""

from __future__ import annotations

import io
import time
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console
from rich.progress import TaskID
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.render import DelayedProgress
from grpo_cli.core.progress import Pace
from grpo_cli.jobs.pipeline import annotate
from tests.conftest import SAMPLE_DIR, SAMPLE_FILES


@pytest.fixture
def per_step(tmp_path: Path) -> list[Path]:
    """The sample log split into one JSONL file per step (a group never spans steps)."""
    log = pl.read_parquet(SAMPLE_FILES["parquet"])
    folder = tmp_path / "steps"
    folder.mkdir()
    paths = []
    for step in (1, 2, 3, 4):
        path = folder / f"{step}.jsonl"
        log.filter(pl.col("step") == step).write_ndjson(path)
        paths.append(path)
    return paths


def test_a_folder_is_one_log(runner: CliRunner, per_step: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "all.parquet"
    result = runner.invoke(
        app, ["compute", str(per_step[0].parent), "-o", str(out), "-q", "--deterministic"]
    )
    assert result.exit_code == 0, result.stderr
    whole = annotate(
        pl.read_parquet(SAMPLE_FILES["parquet"]).sort("step", maintain_order=True),
        deterministic=True,
    ).frame
    assert pl.read_parquet(out)["advantage"].to_list() == whole["advantage"].to_list()


def test_a_double_star_glob_reaches_every_folder(tmp_path: Path) -> None:
    """``'OUT/**/*.parquet'`` finds the parts at every depth (a Ray OUT_DIR of inputs from
    several folders keeps them), in the natural order of their names; a single ``*`` stays
    one level."""
    from grpo_cli.io.read import expand_sources

    for name in ("x.parquet", "a/y.parquet", "a/b/z.parquet", "a/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    found = expand_sources([f"{tmp_path}/**/*.parquet"])
    assert [str(p.relative_to(tmp_path)) for p in found] == [
        "x.parquet",
        "a/y.parquet",
        "a/b/z.parquet",
    ]
    assert expand_sources([f"{tmp_path}/*/*.parquet"]) == [tmp_path / "a" / "y.parquet"]
    # "**" alone matches the folders too: only the files are taken
    assert [p.name for p in expand_sources([f"{tmp_path}/**"])] == [
        "notes.txt",
        "x.parquet",
        "y.parquet",
        "z.parquet",
    ]


def test_a_glob_that_matches_only_folders_says_so(tmp_path: Path) -> None:
    from grpo_cli.core.errors import InputError
    from grpo_cli.io.read import expand_sources

    (tmp_path / "runs" / "step_1").mkdir(parents=True)
    with pytest.raises(InputError) as info:
        expand_sources([f"{tmp_path}/runs/*"])
    assert info.value.message == f"no file matches {tmp_path}/runs/* (only folders do)"
    assert info.value.hint == f"match the files in them, such as '{tmp_path}/runs/*/*.parquet'"


def test_several_inputs_need_an_output(runner: CliRunner, per_step: list[Path]) -> None:
    result = runner.invoke(app, ["compute", *map(str, per_step)])
    assert (result.exit_code, result.stderr) == (
        2,
        "error: several inputs are read as one log: say where it goes\n"
        "hint: give -o PATH (or -o - for standard output)\n",
    )


@pytest.mark.parametrize("engine", [[], ["--low-memory"], ["--backend", "ray"]])
def test_standard_input_and_files_are_refused_on_every_engine(
    runner: CliRunner, tmp_path: Path, engine: list[str]
) -> None:
    """The inputs are expanded once, for every engine: ``-`` beside files is one refusal,
    before any engine runs (Ray looked for a file named ``-``)."""
    out = tmp_path / "out.parquet"
    args = ["compute", "-", str(SAMPLE_FILES["parquet"]), "-o", str(out), *engine]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: standard input (-) cannot be combined with files",
        "hint: give either - or files",
    ]
    assert not out.exists()


def test_out_dir_writes_one_file_per_input(
    runner: CliRunner, per_step: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "annotated"
    out.mkdir()
    args = [
        "compute",
        *map(str, per_step),
        "--out-dir",
        str(out),
        "--output-format",
        "parquet",
        "-q",
        "--deterministic",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"{s}.adv.parquet" for s in (1, 2, 3, 4)]
    combined = annotate(pl.concat([pl.read_ndjson(p) for p in per_step]), deterministic=True).frame
    for step in (1, 2, 3, 4):
        part = pl.read_parquet(out / f"{step}.adv.parquet")
        assert part.columns == [*pl.read_ndjson(per_step[0]).columns, "advantage"]
        expected = combined.filter(pl.col("step") == step)
        assert part["advantage"].to_list() == expected["advantage"].to_list()


def test_a_group_may_span_files(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("prompt_id,reward\np,1\n")
    (tmp_path / "b.csv").write_text("prompt_id,reward\np,0\n")
    out = tmp_path / "out"
    out.mkdir()
    args = [
        "compute",
        str(tmp_path / "a.csv"),
        str(tmp_path / "b.csv"),
        "--out-dir",
        str(out),
        "-q",
    ]
    assert runner.invoke(app, args).exit_code == 0
    a = pl.read_csv(out / "a.adv.csv")["advantage"][0]
    b = pl.read_csv(out / "b.adv.csv")["advantage"][0]
    assert (a, b) == pytest.approx((0.5 / (0.5**0.5 + 1e-8), -0.5 / (0.5**0.5 + 1e-8)))


@pytest.fixture(params=["as_logged", "split_mid_step"])
def trl_parts(request: pytest.FixtureRequest, tmp_path: Path) -> list[Path]:
    """The sample TRL dump's files, or its rows cut into two files in the middle of a
    group of step 10 (row 18 of 32: groups are runs of 4 rows within a step)."""
    files = sorted((SAMPLE_DIR / "trl_completions").glob("*.parquet"))
    if request.param == "as_logged":
        return files
    log = pl.concat([pl.read_parquet(p) for p in files])
    parts = [tmp_path / "part_1.parquet", tmp_path / "part_2.parquet"]
    log.head(18).write_parquet(parts[0])
    log.slice(18).write_parquet(parts[1])
    return parts


@pytest.mark.parametrize("weights", [[], ["--reward-weights", "1,0.5"]], ids=["sum", "weighted"])
def test_out_dir_gives_the_numbers_of_the_combined_log(
    runner: CliRunner, trl_parts: list[Path], weights: list[str], tmp_path: Path
) -> None:
    """A TRL dump's rewards are its numeric columns: never the column --out-dir adds to
    know each row's file. Advantages, --with-stats columns and the --summary table are
    those of -o on the combined log."""
    common = ["compute", *map(str, trl_parts), "--preset", "trl", "--replace", "--with-stats"]
    common += [*weights, "-q", "--deterministic"]
    out = tmp_path / "annotated"
    out.mkdir()
    split = [*common, "--out-dir", str(out), "--summary", str(tmp_path / "split.csv")]
    one = [*common, "-o", str(tmp_path / "all.parquet"), "--summary", str(tmp_path / "all.csv")]
    for args in (split, one):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
    parts = pl.concat([pl.read_parquet(out / f"{p.stem}.adv.parquet") for p in trl_parts])
    combined = pl.read_parquet(tmp_path / "all.parquet")
    assert parts.columns == combined.columns
    assert {"advantage", "group_mean", "group_std"} <= set(parts.columns)
    assert parts.equals(combined)
    assert pl.read_csv(tmp_path / "split.csv").equals(pl.read_csv(tmp_path / "all.csv"))
    log = pl.concat([pl.read_parquet(p) for p in trl_parts])
    reward = log["accuracy_reward"] + (0.5 if weights else 1.0) * log["format_reward"].fill_null(0)
    assert parts["group_mean"].mean() == pytest.approx(reward.mean())


def test_out_dir_refuses_to_clobber(
    runner: CliRunner, per_step: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "annotated"
    out.mkdir()
    (out / "2.adv.jsonl").write_text("keep\n")
    result = runner.invoke(app, ["compute", *map(str, per_step), "--out-dir", str(out)])
    assert result.exit_code == 4
    assert result.stderr.startswith(f"error: {out / '2.adv.jsonl'} already exists")
    assert sorted(p.name for p in out.iterdir()) == ["2.adv.jsonl"]
    assert (out / "2.adv.jsonl").read_text() == "keep\n"


def test_progress_appears_only_after_the_delay() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80)
    with DelayedProgress(console, enabled=True, delay=0.0) as progress:
        task = progress.add("reading", total=2)
        progress.advance(task)
        deadline = time.monotonic() + 10
        while not progress.progress.live.is_started:  # the delay's timer has fired
            assert time.monotonic() < deadline
            time.sleep(0.001)
    assert "reading" in buffer.getvalue()
    quiet = io.StringIO()
    with DelayedProgress(Console(file=quiet, force_terminal=True), enabled=True, delay=60):
        pass
    assert quiet.getvalue() == ""
    off = io.StringIO()
    with DelayedProgress(Console(file=off, force_terminal=True), enabled=False, delay=0.0) as p:
        p.add("reading", total=1)
    assert off.getvalue() == ""
    assert not p.progress.live.is_started


@pytest.mark.parametrize(
    ("pace", "rate", "left"),
    [
        (Pace(done=3_000_000, total=12_000_000, seconds=1.5), 2_000_000.0, 4.5),
        (Pace(done=12_000_000, total=12_000_000, seconds=6.0), 2_000_000.0, 0.0),
        (Pace(done=500, total=None, seconds=0.25), 2_000.0, None),  # no total: no time left
        (Pace(done=0, total=100, seconds=3.0), None, None),  # no row yet: no rate
        (Pace(done=10, total=100, seconds=0.0), None, None),
    ],
)
def test_pace_rate_and_time_left(pace: Pace, rate: float | None, left: float | None) -> None:
    assert pace.rate == pytest.approx(rate)
    assert pace.left == pytest.approx(left)


def test_a_line_of_rows_shows_its_rate_and_time_left() -> None:
    """A line with a unit: done of total, the rate and the time left; a finished line keeps
    the rate it finished with; a line without a unit: done of total only."""
    from rich.progress import Task

    from grpo_cli.cli.render import _PaceColumn

    def shown(task: Task) -> str:
        return _PaceColumn().render(task).plain

    def task(completed: float, total: float | None, unit: str | None) -> Task:
        return Task(TaskID(0), "x", total, completed, _get_time=lambda: 14.0, fields={"unit": unit})

    running = task(3_000_000, 12_000_000, "rows")
    running.start_time = 12.5  # 1.5 s ago
    assert shown(running) == "3,000,000/12,000,000 rows  2,000,000 rows/s  0:00:04 left"
    done = task(12_000_000, 12_000_000, "rows")
    done.start_time, done.finished_time = 0.0, 4.0
    assert shown(done) == "12,000,000/12,000,000 rows  3,000,000 rows/s  0:00:00 left"
    unknown = task(500, None, "rows")
    unknown.start_time = 13.75
    assert shown(unknown) == "500/? rows  2,000 rows/s"
    assert shown(task(0, 100, "rows")) == "0/100 rows  ? rows/s"  # not started
    assert shown(task(1, 2, None)) == "1/2"

"""``grpo_cli.run_job``: a whole job (read, compute, write) from Python, on every kind of
engine, writing what ``compute_advantages`` returns for the same log (the Ray engine's
run is in tests/test_ray_engine.py, on its module's local Ray)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from grpo_cli import compute_advantages, run_job
from grpo_cli.core.errors import Message, OptionsError, OutputError
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.jobs.run import JobResult
from tests.conftest import import_or_skip
from tests.test_outputs import _host_tag


def reward_log() -> pl.DataFrame:
    """Two steps, uneven groups, a zero-variance group, a null reward."""
    return pl.DataFrame(
        {
            "step": [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
            "prompt_id": ["a", "a", "a", "b", "b", "a", "a", "c", "c", "c", "c"],
            "reward": [1.0, 0.0, 0.5, 2.0, 2.0, 0.25, None, 1.0, 3.0, 0.0, 1.5],
        }
    )


ENGINES = [
    ("polars", {}),
    ("polars", {"estimator": "rloo", "with_stats": True}),
    ("partitioned", {}),
    ("partitioned", {"estimator": "dr_grpo", "ddof": 0}),
    ("torch", {"estimator": "rloo"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "options"), ENGINES, ids=[str(e) for e in ENGINES])
def test_run_job_writes_what_compute_advantages_returns(
    tmp_path: Path, backend: str, options: dict[str, Any]
) -> None:
    if backend == "torch":
        import_or_skip("torch")
    log = reward_log()
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    log.write_parquet(source)
    result = run_job([source], out, options=options, engine={"backend": backend})
    expected = compute_advantages(log, **options)
    assert_frame_equal(pl.read_parquet(out), expected, check_exact=False, abs_tol=1e-12)
    assert isinstance(result, JobResult)
    assert result.engine.backend == backend
    assert result.options.group_cols == ("step", "prompt_id")  # grouped within each step
    assert (result.run.rows, result.run.groups, result.run.null_rewards) == (11, 4, 1)
    assert result.output == f"{out} (parquet)"
    assert result.paths == (out,)


def test_run_job_default_output_preset_and_group_table(tmp_path: Path) -> None:
    """No output: beside the input, named after it; a preset's options; the per-group
    table written with the output."""
    source = tmp_path / "log.jsonl"
    reward_log().write_ndjson(source)
    result = run_job([source], preset="verl", summary_path=tmp_path / "groups.csv")
    written = tmp_path / "log.adv.jsonl"
    assert result.paths == (written,)
    expected = annotate(reward_log(), "verl").frame
    assert_frame_equal(pl.read_ndjson(written), expected, check_exact=False, abs_tol=1e-12)
    groups = pl.read_csv(tmp_path / "groups.csv")
    assert groups.height == 4
    assert result.summary_path == tmp_path / "groups.csv"


def test_run_job_reports_leftovers_through_its_callback(tmp_path: Path) -> None:
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    reward_log().write_parquet(source)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f".out.parquet.grpo-adv.{dead.pid}@{_host_tag()}.abc.part"
    leftover.write_bytes(b"x" * 10)
    lines: list[Message] = []
    run_job([source], out, warn=lines.append)
    assert lines == [
        f"removed 1 leftover(s) of killed grpo-adv runs in {tmp_path} (10 B): {leftover.name}"
    ]
    assert not leftover.exists()


def test_run_job_warnings_name_options_for_their_reader(tmp_path: Path) -> None:
    """A job's warnings are messages with option references, not text in one spelling:
    Python reads keywords, the command line its flags (the library spells no flag)."""
    from grpo_cli.cli.params import flag_spelling
    from grpo_cli.core.errors import as_text
    from tests.conftest import SAMPLE_DIR

    out = tmp_path / "out.parquet"
    result = run_job([SAMPLE_DIR / "trl_completions"], out, preset="trl", replace=True)
    inferred = "inferred {} from runs of equal prompts (TRL num_generations)"
    assert [str(w) for w in result.warnings] == [inferred.format("group_size=4")]
    assert [as_text(w).render(flag_spelling) for w in result.warnings] == [
        inferred.format("--group-size 4")
    ]


def test_run_job_refuses_before_writing(tmp_path: Path) -> None:
    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    reward_log().write_parquet(source)
    out.write_text("mine")
    with pytest.raises(OutputError):
        run_job([source], out)
    assert out.read_text() == "mine"  # never clobbered without force
    with pytest.raises(OptionsError, match=r"^replace=True works with the in-memory engines"):
        run_job([source], out, replace=True, engine={"backend": "partitioned"})
    with pytest.raises(OptionsError, match="unknown estimator 'nope'"):
        run_job([source], tmp_path / "new.parquet", options={"estimator": "nope"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "out.parquet"]


def test_progress_stages_on_the_in_memory_engines(tmp_path: Path) -> None:
    import contextlib

    source = tmp_path / "log.parquet"
    reward_log().write_parquet(source)
    seen: dict[str, int] = {}
    run_job([source], tmp_path / "o.csv", progress=lambda: contextlib.nullcontext(Recorder(seen)))
    assert seen == {"reading": 1, "computing": 1, "writing": 1}


class Recorder:
    """A progress display keeping each line's done count (and total and unit, in ``seen``
    under ``description/total``)."""

    def __init__(self, seen: dict[str, Any]) -> None:
        self.seen = seen

    def add(self, description: str, total: int | None, unit: str | None = None) -> str:
        self.seen[description] = 0
        if unit is not None:
            self.seen[f"{description}/total"] = f"{total} {unit}"
        return description

    def advance(self, task: Any, steps: int = 1) -> None:
        self.seen[task] += steps


@pytest.mark.parametrize("estimator", ["grpo", "batch_std"])
def test_progress_of_the_partitioned_passes(tmp_path: Path, estimator: str) -> None:
    """The partitioned engine's passes, from its worker process: each counts every row of
    the footer's total (a batch-level estimator's batch statistics too). The log is not in
    step order (its steps start again 1,000 times), and that shows before any row is
    computed in one pass."""
    import contextlib

    source = tmp_path / "log.parquet"
    pl.concat([reward_log()] * 1000).write_parquet(source)
    seen: dict[str, Any] = {}
    run_job(
        [source],
        tmp_path / "o.parquet",
        options={"estimator": estimator},
        engine={"backend": "partitioned"},
        progress=lambda: contextlib.nullcontext(Recorder(seen)),
    )
    batch = ("batch statistics",) if estimator == "batch_std" else ()
    stages = ("partitioning", *batch, "computing", "writing")
    assert seen == {
        **{stage: 11_000 for stage in stages},
        **{f"{stage}/total": "11000 rows" for stage in stages},
    }


@pytest.mark.slow
def test_readme_run_job_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's Python API example of run_job runs as written and writes what the
    in-memory pipeline computes."""
    import re
    import shutil

    from tests.conftest import ROOT, SAMPLE_DIR

    readme = (ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "run_job(" in b]
    assert len(blocks) == 1
    shutil.copytree(SAMPLE_DIR, tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "README.md", "exec"), {})
    log = pl.read_parquet(tmp_path / "sample_data" / "rewards.parquet")
    expected = annotate(log, "verl", estimator="rloo")
    assert_frame_equal(pl.read_parquet(tmp_path / "annotated.parquet"), expected.frame)
    assert capsys.readouterr().out == (
        f"annotated.parquet (parquet) {expected.run.rows} {expected.run.zero_std_groups}\n"
    )


def test_the_figures_are_computed_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that never reads ``.run`` (``grpo-adv compute -q``) pays no metric pass."""
    from grpo_cli.core import metrics

    calls: list[int] = []
    partials = metrics.partials

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return partials(*args, **kwargs)

    monkeypatch.setattr(metrics, "partials", counted)
    source = tmp_path / "log.parquet"
    reward_log().write_parquet(source)
    result = run_job([source], tmp_path / "o.parquet", span_check=False)
    assert calls == []
    assert result.run.rows == 11
    assert calls == [1]


def test_progress_of_the_one_pass_route(tmp_path: Path) -> None:
    """A log in step order: one line, every row of the footer's total."""
    import contextlib

    source = tmp_path / "log.parquet"
    pl.concat([reward_log()] * 1000).sort("step", maintain_order=True).write_parquet(source)
    seen: dict[str, Any] = {}
    run_job(
        [source],
        tmp_path / "o.parquet",
        engine={"backend": "partitioned"},
        progress=lambda: contextlib.nullcontext(Recorder(seen)),
    )
    assert seen == {"computing in one pass": 11_000, "computing in one pass/total": "11000 rows"}

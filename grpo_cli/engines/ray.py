"""The Ray engine (``--backend ray``): reward logs spread over many files and machines, on
a Ray cluster, with Ray Data.

1. **Read.** Parquet inputs with Ray Data's own reader (row groups become blocks, read in
   parallel); JSONL and CSV inputs one file per task with grpo-adv's reader (the same
   parsing as on one machine). Key columns a dump layout derives (verl's uid group) are
   added per block.
2. **Shuffle.** Ray Data's hash shuffle by the group key (``Dataset.repartition(n,
   keys=...)``): every group lands whole in one block (Ray never splits a keyed shuffle's
   output blocks), whatever file or machine its rows came from.
3. **Batch statistics** (batch-level estimators, GDPO): the shuffled blocks are kept
   (``materialize``), each block sends the mergeable partials of its batch statistics to
   the driver, which merges them (one small row per batch value) and hands them back to
   every block (:mod:`grpo_cli.engines.batch_partials`).
4. **Annotate and write.** Each block is annotated by the Polars engine on the plan made
   once (the value checks run per block, the collision fallback per block), written as one
   Parquet part file, and its run figures are returned as partial aggregates
   (:mod:`grpo_cli.core.metrics`); the driver merges them. The driver never collects the data.

Every input row is written exactly once with every input column and the added columns; the
order of rows across parts is not kept (keep a row id column to restore it). Part files are
named by the write task, so a task Ray retries after a worker dies rewrites its own parts.
The output folder is written beside its final path and renamed when complete.

Ray is imported only on this path, here, in ray_cluster and in ray_tasks (``pip install
'grpo-adv[ray]'``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import GrpoAdvError, InputError, Message, OptionsError, option
from grpo_cli.core.run_summary import RunSummary
from grpo_cli.engines import FileJob
from grpo_cli.engines.batch_partials import merged_stats, needs_batch_stats
from grpo_cli.engines.ray_cluster import first_line, import_ray, session

if TYPE_CHECKING:
    from grpo_cli.core.plan import Plan

READ_BATCH_ROWS: Final = 65_536  # rows per batch when an unreadable input is looked for
BYTES_PER_PARTITION: Final = 64 << 20  # input bytes per shuffle partition
MAX_PARTITIONS: Final = 4096


@dataclass(frozen=True)
class RayEngine:
    """``--backend ray``: every estimator that reads rows in no particular order."""

    info: EngineInfo

    def refusal(self, plan: Plan) -> Message | None:
        """Positional groups and process supervision (they need the rows in order)."""
        if plan.estimator.unit == "step":
            return "process supervision (its steps need the rows in order)"
        if plan.options.group_size is not None:
            return option("group_size") + " (positional groups need the rows in order)"
        return None

    def require(self) -> None:
        """Ray with Ray Data, or the install hint."""
        import_ray()

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Annotate ``job.sources`` into the folder ``job.output`` (see the module
        docstring)."""
        return run(job)


ENGINE = RayEngine(ENGINES["ray"])


# ------------------------------------------------------------------ the run
def _quiet(ray: Any) -> None:
    """No progress bars, banners or logged tracebacks from Ray Data on the user's terminal
    (grpo-adv reports an error itself, in one line), and a task's own error raised as it
    was (not wrapped), so that it can be."""
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.enable_auto_log_stats = False
    context.raise_original_map_exception = True
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def run(job: FileJob, *, partitions: int | None = None) -> RunSummary:
    """Read, shuffle, (batch statistics), annotate and write: see the module docstring.
    Errors raised on the cluster (a bad value in some file) come back as they were
    raised; an input Ray's reader cannot read is named (exit 3); the cluster lost is
    exit 4 (:mod:`grpo_cli.engines.ray_cluster`)."""
    address = job.plan.engine.ray_address
    staging = [p for p in (job.output, job.groups) if p is not None]
    notes = job.notes or (lambda _: None)
    with session(address, notes=notes, staging=staging, spell=job.spell) as ray:
        try:
            if address is not None and address.startswith("ray://"):
                # Ray Data cannot execute through Ray Client: the driver's part runs as a
                # task on the cluster (whose nodes see the same paths).
                remote = ray.remote(num_cpus=0, max_retries=0)(_run_on_cluster)
                summary: RunSummary = ray.get(remote.remote(replace(job, notes=None), partitions))
                return summary
            return _run_on_cluster(job, partitions)
        except GrpoAdvError:
            raise
        except Exception as exc:
            cause = _grpo_cause(exc) or _unreadable_input(job)
            if cause is not None:
                raise cause from None
            raise


def _run_on_cluster(job: FileJob, partitions: int | None) -> RunSummary:
    """:func:`_run` in a process attached to the cluster (the CLI's, or a task's)."""
    ray = import_ray()
    _quiet(ray)
    return _run(ray, job, partitions)


def _grpo_cause(exc: BaseException) -> GrpoAdvError | None:
    """The grpo-adv error a task raised, out of Ray's wrappers."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, GrpoAdvError):
            return copy.copy(current)  # its structure kept, out of Ray's wrappers
        stack += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return None


def _run(ray: Any, job: FileJob, partitions: int | None) -> RunSummary:
    from grpo_cli.engines.ray_tasks import BatchPartials, PartSink

    plan = job.plan
    dataset = _read(ray, job)
    keys = list(plan.keys.exact)
    if keys:
        count = partitions or _partitions(ray, job.sources)
        dataset = dataset.repartition(count, keys=keys)
    stats: pl.DataFrame | None = None
    if needs_batch_stats(plan):
        dataset = dataset.materialize()
        parts = dataset.map_batches(BatchPartials(plan), batch_size=None, batch_format="pyarrow")
        tables = ray.get(parts.to_arrow_refs())
        frames = [pl.DataFrame(pl.from_arrow(t)) for t in tables if t.num_rows]
        stats = merged_stats(frames, plan)
    sink = PartSink(str(job.output), plan, stats, job.derived, _str(job.groups))
    dataset.write_datasink(sink)
    if not sink.partials:
        raise InputError("the inputs have no rows", hint="check the paths given")
    return RunSummary.from_partials(metrics.merge(sink.partials))


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _unreadable_input(job: FileJob) -> InputError | None:
    """After a failure on the cluster: the first Parquet input this machine cannot read
    either, named, with the cause in plain text (the error the Polars engine gives for a
    truncated file, ``cannot read FILE as parquet: ...`` otherwise); None when every input
    reads (the failure was something else). Read batch by batch (bounded memory); only
    on this error path. JSONL and CSV inputs are read by grpo-adv's reader on the
    cluster, which names the file itself."""
    from grpo_cli.io.formats import PARQUET_MAGIC, format_from_suffix, uncompressed_name
    from grpo_cli.io.read import truncated_parquet

    for path in job.sources:
        fmt = job.input_format or format_from_suffix(uncompressed_name(path))
        if fmt != "parquet":
            continue
        try:
            with path.open("rb") as handle:
                head = handle.read(4)
                size = handle.seek(0, 2)
                handle.seek(max(size - 4, 0))
                tail = handle.read(4)
            if head == PARQUET_MAGIC and (tail != PARQUET_MAGIC or size < 12):
                return truncated_parquet(str(path))
            import pyarrow.parquet as pq

            for _ in pq.ParquetFile(path).iter_batches(batch_size=READ_BATCH_ROWS):
                pass
        except Exception as exc:
            return InputError(
                f"cannot read {path} as parquet: {first_line(str(exc)) or type(exc).__name__}",
                hint="the file may be truncated, corrupt or not Parquet: write it again, or "
                "leave it out",
            )
    return None


def _partitions(ray: Any, sources: Sequence[Path]) -> int:
    """About BYTES_PER_PARTITION input bytes per shuffle partition, and at least one per
    CPU of the cluster (every core busy)."""
    size = sum(p.stat().st_size for p in sources if p.exists())
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(cpus, min(MAX_PARTITIONS, -(-size // BYTES_PER_PARTITION)))


def _read(ray: Any, job: FileJob) -> Any:
    """The inputs as one dataset, with the derived key columns."""
    from grpo_cli.io.formats import format_from_suffix, uncompressed_name

    formats = {
        job.input_format or format_from_suffix(uncompressed_name(p)) or "" for p in job.sources
    }
    if len(formats) != 1 or "" in formats or "json" in formats:
        raise OptionsError(
            option("backend", "ray") + " reads Parquet, JSONL or CSV files of one format",
            hint="give files of one format (by suffix), or name it with " + option("input_format"),
        )
    from grpo_cli.engines.ray_tasks import Derive, ReadText

    fmt = formats.pop()
    paths = [str(p) for p in job.sources]
    if fmt == "parquet":
        dataset = ray.data.read_parquet(paths)
        if job.derived:
            dataset = dataset.map_batches(
                Derive(job.derived), batch_size=None, batch_format="pyarrow"
            )
        return dataset
    files = ray.data.from_items([{"path": p} for p in paths])
    return files.map_batches(
        ReadText(fmt, job.plan.keys.exact, job.derived), batch_size=1, batch_format="pyarrow"
    )

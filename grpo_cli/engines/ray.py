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
   every block (:mod:`grpo_cli.batch_stats`).
4. **Annotate and write.** Each block is annotated by the Polars engine on the plan made
   once (the value checks run per block, the collision fallback per block), written as one
   Parquet part file, and its run figures are returned as partial aggregates
   (:mod:`grpo_cli.metrics`); the driver merges them. The driver never collects the data.

Every input row is written exactly once with every input column and the added columns; the
order of rows across parts is not kept (keep a row id column to restore it). Part files are
named by the write task, so a task Ray retries after a worker dies rewrites its own parts.
The output folder is written beside its final path and renamed when complete.

Ray is imported only here, on this path (``pip install 'grpo-adv[ray]'``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli import metrics
from grpo_cli.batch_stats import merged_stats, needs_batch_stats
from grpo_cli.engines import ENGINES, EngineInfo, FileJob
from grpo_cli.errors import ClusterError, GrpoAdvError, InputError, OptionsError
from grpo_cli.summary import RunSummary

if TYPE_CHECKING:
    from grpo_cli.plan import Plan

INSTALL_HINT: Final = "pip install 'grpo-adv[ray]'"
CONNECT_TIMEOUT_S: Final = 10.0  # a TCP probe of HOST:PORT before Ray is asked to attach
ATTACH_TIMEOUT_S: Final = 50.0  # ray.init retries an unreachable cluster for minutes
BYTES_PER_PARTITION: Final = 64 << 20  # input bytes per shuffle partition
MAX_PARTITIONS: Final = 4096


@dataclass(frozen=True)
class RayEngine:
    """``--backend ray``: every estimator that reads rows in no particular order."""

    info: EngineInfo

    def refusal(self, plan: Plan) -> str | None:
        """Positional groups and process supervision (they need the rows in order)."""
        if plan.estimator.unit == "step":
            return "process supervision (its steps need the rows in order)"
        if plan.options.group_size is not None:
            return "--group-size (positional groups need the rows in order)"
        return None

    def require(self) -> None:
        """Ray with Ray Data, or the install hint."""
        import_ray()

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Annotate ``job.sources`` into the folder ``job.output`` (see the module
        docstring)."""
        return run(job)


ENGINE = RayEngine(ENGINES["ray"])


def import_ray() -> Any:
    """The ``ray`` module with Ray Data, or the one-line error with the install hint."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise OptionsError(
            "--backend ray needs Ray (with Ray Data), which is not installed",
            hint=f"install it with: {INSTALL_HINT}",
        ) from None
    return ray


# ------------------------------------------------------------------ the cluster
def _host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto``."""
    if address == "auto":
        return None
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise OptionsError(
            f"--ray-address {address!r} is not HOST:PORT, ray://HOST:PORT or auto",
            hint="give the head node's address, for example --ray-address 10.0.0.1:6379",
        )
    return host.strip("[]"), int(port)


def _unreachable(address: str, why: str) -> ClusterError:
    return ClusterError(
        f"cannot reach the Ray cluster at {address}: {why}; nothing was written",
        hint="check the address (ray status on the head node shows it); a cluster with "
        "token authentication (ray start's default) also needs RAY_AUTH_MODE=token and its "
        "token here (RAY_AUTH_TOKEN or ~/.ray/auth_token); or drop --ray-address to run on "
        "an embedded local Ray",
    )


def _probe(address: str) -> None:
    """Refuse at once an address where nothing listens (Ray itself would retry it for
    minutes)."""
    where = _host_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise _unreachable(address, exc.strerror or str(exc) or "no answer") from None


@contextlib.contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """Ray, attached to the cluster at ``address`` (``auto``, ``HOST:PORT``,
    ``ray://HOST:PORT``) or, with None, to an embedded local instance started now and
    stopped at the end. A Ray the caller has already initialized is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        _probe(address)
    # Ray's core logs every retry of an unanswered address to the process's stderr, where
    # Python's logging cannot reach it: stderr goes to /dev/null while Ray attaches.
    with _stderr_silenced() as stderr_fd:
        watchdog = threading.Timer(ATTACH_TIMEOUT_S, _give_up, args=(address or "local", stderr_fd))
        watchdog.daemon = True
        watchdog.start()
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise _unreachable(address or "local", _first_line(str(exc))) from None
        finally:
            watchdog.cancel()
    try:
        yield ray
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[int]:
    """File descriptor 2 on /dev/null for the block; yields a copy of the real one."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield saved
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def _give_up(address: str, stderr_fd: int) -> None:
    """Ray did not attach in time: say so and exit (ray.init cannot be interrupted)."""
    from grpo_cli.errors import EXIT_OUTPUT

    error = _unreachable(address, f"no answer within {ATTACH_TIMEOUT_S:.0f} s")
    os.write(stderr_fd, f"error: {error.message}\nhint: {error.hint}\n".encode())
    os._exit(EXIT_OUTPUT)


def _first_line(text: str) -> str:
    """The first sentence of Ray's message (its advice names Ray's own flags)."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "no answer")
    return line.split(". ")[0].rstrip(".")


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


# ------------------------------------------------------------------ the run
def run(job: FileJob, *, partitions: int | None = None) -> RunSummary:
    """Read, shuffle, (batch statistics), annotate and write: see the module docstring.
    Errors raised on the cluster (a bad value in some file) come back as they were
    raised."""
    address = job.plan.options.ray_address
    with connected(address) as ray:
        try:
            if address is not None and address.startswith("ray://"):
                # Ray Data cannot execute through Ray Client: the driver's part runs as a
                # task on the cluster (whose nodes see the same paths).
                remote = ray.remote(num_cpus=0, max_retries=0)(_run_on_cluster)
                summary: RunSummary = ray.get(remote.remote(job, partitions))
                return summary
            return _run_on_cluster(job, partitions)
        except GrpoAdvError:
            raise
        except Exception as exc:
            cause = _grpo_cause(exc)
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
            return type(current)(current.message, hint=current.hint)
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


def _partitions(ray: Any, sources: Sequence[Path]) -> int:
    """About BYTES_PER_PARTITION input bytes per shuffle partition, and at least one per
    CPU of the cluster (every core busy)."""
    size = sum(p.stat().st_size for p in sources if p.exists())
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(cpus, min(MAX_PARTITIONS, -(-size // BYTES_PER_PARTITION)))


def _read(ray: Any, job: FileJob) -> Any:
    """The inputs as one dataset, with the derived key columns."""
    from grpo_cli.io import format_from_suffix, uncompressed_name

    formats = {
        job.input_format or format_from_suffix(uncompressed_name(p)) or "" for p in job.sources
    }
    if len(formats) != 1 or "" in formats or "json" in formats:
        raise OptionsError(
            "--backend ray reads Parquet, JSONL or CSV files of one format",
            hint="give files of one format (by suffix), or name it with --input-format",
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


def annotate_dataset(
    sources: Sequence[Path],
    output: Path,
    plan: Plan,
    *,
    input_format: str | None = None,
    derived: Sequence[str] = (),
    groups: Path | None = None,
    partitions: int | None = None,
) -> RunSummary:
    """The Python API of the engine: annotate ``sources`` into the (existing, empty)
    folder ``output`` on the plan (see the module docstring)."""
    job = FileJob(tuple(sources), output, plan, input_format, tuple(derived), groups)
    return run(job, partitions=partitions)

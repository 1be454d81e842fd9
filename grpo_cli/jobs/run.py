"""``run_job``: one whole annotation job (read, compute, write) on any engine.

Whatever the engine, the options are checked and the targets planned (never an input,
never clobbered without ``force``, leftovers of killed runs removed) before anything is
read, and every output lands atomically (all or none). How the data is read, computed and
written is the engine's registry entry's ``io``
(:data:`grpo_cli.core.engine_options.ENGINES`): ``"frame"`` (polars, torch: the log in
memory, standard input allowed, one output or one per input), ``"file"`` (partitioned: one
Parquet file to one, bounded memory) or ``"dataset"`` (ray: many files to a folder of
Parquet parts). Neither Typer nor Rich is imported: progress and notes go to callbacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from grpo_cli.core.columns import SOURCE_KEY, user_columns
from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.errors import GrpoAdvError, Message, OptionsError, Verbatim, option
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.progress import NoProgress, Progress, reporting
from grpo_cli.jobs.outputs import Job, Targets

if TYPE_CHECKING:
    import polars as pl

    from grpo_cli.core.run_summary import RunSummary
    from grpo_cli.engines import FileEngine


__all__ = ["EngineOptions", "JobResult", "run_job"]


@dataclass
class JobResult:
    """What a job did: the options it ran with, where, the dump layout read (or None),
    what was written for people (``out.parquet (parquet)``, ``standard output``, ``OUT/
    (Parquet parts)``, ``3 files: a ... c``), the summary's path, the files (or folder)
    written (none for standard output), and on first use the run's figures (``run``: one
    more pass over the rows on an in-memory engine) and its ``warnings``."""

    options: AdvantageOptions
    engine: EngineOptions
    layout: str | None
    output: str
    summary_path: Path | None
    paths: tuple[Path, ...]
    figures: Callable[[], RunSummary] = field(repr=False)
    notices: Callable[[], tuple[Message, ...]] = field(default=tuple, repr=False)

    @cached_property
    def run(self) -> RunSummary:
        return self.figures()

    @cached_property
    def warnings(self) -> tuple[Message, ...]:
        return self.notices()


def run_job(
    inputs: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    preset: str | None = None,
    options: AdvantageOptions | Mapping[str, Any] | None = None,
    engine: EngineOptions | Mapping[str, Any] | None = None,
    replace: bool = False,
    out_dir: Path | None = None,
    input_format: str | None = None,
    output_format: str | None = None,
    summary_path: Path | None = None,
    summary_format: str | None = None,
    force: bool = False,
    span_check: bool = True,
    progress: Callable[[], AbstractContextManager[Progress]] | None = None,
    notes: Callable[[Message], None] | None = None,
    warn: Callable[[Message], None] | None = None,
    fatal: Callable[[GrpoAdvError], None] | None = None,
) -> JobResult:
    """Annotate the log in ``inputs`` with group-relative advantages and write it.

    Args:
        inputs: the log's files, folders or globs, read as one log; ``["-"]``: standard
            input (in-memory engines only).
        output: the output file (``"-"``: standard output; a folder for a dataset engine);
            None: beside the single input, named after it (``rewards.adv.parquet``).
        preset: a trainer preset (``"verl"``, ``"trl"``, ...), or None.
        options: the computation's options: :class:`AdvantageOptions` (every field then
            explicit), or a mapping of some of its fields (``eps=1e-6``,
            ``estimator="rloo"``, ``group_cols=(...)``) over the preset's.
        engine: where it runs: :class:`grpo_cli.core.engine_options.EngineOptions`, or a
            mapping of ``backend`` (a name in :data:`grpo_cli.core.engine_options.ENGINES`,
            default ``polars``), ``device`` (torch), ``ray_address`` (ray).
        replace: recompute input columns named like the added ones (in-memory engines).
        out_dir: one annotated file per input in this folder (in-memory engines).
        input_format, output_format: ``parquet``, ``jsonl`` or ``csv``; None: by suffix.
        summary_path: also write the per-group table there (``"-"``: standard output).
        summary_format: its format when the suffix does not say.
        force: overwrite existing outputs (never an input).
        span_check: warn about groups spread over several steps.
        progress: a factory of the progress display: the in-memory engines' stages
            (files read, computing, outputs written), the ``partitioned`` engine's passes
            (rows done; :mod:`grpo_cli.core.progress`); Ray's shows nothing.
        notes: where a dataset engine says which cluster it runs on, or None.
        warn: where removed leftovers of killed runs are reported, or None.
        fatal: where a dataset engine says why it ends the process at once, or None
            (see :class:`grpo_cli.engines.FileJob`).
        The callbacks get messages that name options by keyword
        (:mod:`grpo_cli.core.errors`): they spell them as their reader does.

    Returns:
        What was written and the run's figures (:class:`JobResult`).

    Raises:
        OptionsError, InputError, OutputError: what the CLI reports with its exit codes;
        nothing is written then (outputs land all or none).
    """
    from grpo_cli.core.resolve import make_request
    from grpo_cli.engines import check, get_engine
    from grpo_cli.jobs.outputs import plan_targets

    request = make_request(preset, options, engine)  # every data-free check, once
    chosen = get_engine(request.engine.backend)
    io = chosen.info.io
    if io != "frame":  # before any file is looked at (a frame's engine: on the plan)
        check(chosen, request)
    if summary_format is not None and (summary_path is None or io == "dataset"):
        raise OptionsError(
            option("summary_format")
            + " names the format of a "
            + option("summary_path")
            + " table",
            hint="give " + option("summary_path", Verbatim("PATH")) + " too"
            if summary_path is None
            else option("backend", request.engine.backend)
            + " writes "
            + option("summary_path")
            + " as a folder of Parquet parts",
        )
    if summary_path is not None and io != "dataset":  # a dataset engine writes a folder
        from grpo_cli.io.formats import table_format

        table_format(summary_path, summary_format, option("summary_format"))
    if replace and io != "frame":
        raise OptionsError(
            option("replace", True)
            + " works with the in-memory engines, not "
            + option("backend", request.engine.backend),
            hint="drop the logged column first, or name the new one with "
            + option("advantage_col"),
        )
    job = Job(
        request=request,
        sources=[str(source) for source in inputs],
        output=None if output is None else str(output),
        out_dir=out_dir,
        input_format=input_format,
        output_format=output_format,
        summary_path=summary_path,
        summary_format=summary_format,
        force=force,
        replace=replace,
        span_check=span_check,
        notes=notes,
        warn=warn,
        fatal=fatal,
    )
    targets = plan_targets(job, io)  # once, before any engine reads
    if io == "dataset":  # Ray reports no progress: its cluster's messages have stderr
        return _run_files(job, targets)
    with (progress or (lambda: contextlib.nullcontext(NoProgress())))() as shown:
        if io == "file":
            with reporting(shown):  # the engine's passes, as their rows are done
                return _run_files(job, targets)
        return _run_frame(job, targets, shown)


def _run_frame(job: Job, targets: Targets, progress: Progress) -> JobResult:
    """An in-memory engine: read, resolve on the log, annotate, write (see :func:`run_job`)."""
    from grpo_cli.engines import start_loading
    from grpo_cli.io.atomic import atomic_writes
    from grpo_cli.io.write import write_table
    from grpo_cli.jobs.outputs import read_input, write_outputs
    from grpo_cli.jobs.pipeline import annotate_request

    start_loading(job.request.engine.backend)  # torch imports while the log is read
    reading = progress.add("reading", total=max(len(job.paths), 1))
    log = read_input(
        job.paths,
        job.input_format,
        job.request.key_cols,
        source_col=None if job.out_dir is None else SOURCE_KEY,
        on_file=lambda _: progress.advance(reading),
    )
    if not job.paths:  # standard input
        progress.advance(reading)
    computing = progress.add("computing", total=1)
    result = annotate_request(  # the one resolution, on the log read
        log.frame, job.request, replace=job.replace, span_check=job.span_check
    )
    progress.advance(computing)
    writing = progress.add("writing", total=len(targets.outputs))
    with atomic_writes(force=job.force) as stage:  # every output lands, or none
        shown = write_outputs(
            result.frame, targets.outputs, stage, lambda: progress.advance(writing), log.format
        )
        if job.summary_path is not None:
            write_table(
                result.groups,
                job.summary_path,
                force=job.force,
                protected=job.paths,
                stage=stage,
                fmt=job.summary_format,
                flag=option("summary_path"),
            )
    return JobResult(
        options=result.options,
        engine=result.engine,
        layout=result.layout,
        output=shown,
        summary_path=job.summary_path,
        paths=targets.paths,
        figures=lambda: result.run,
        notices=lambda: (*log.warnings, *result.warnings),
    )


def _run_files(job: Job, targets: Targets) -> JobResult:
    """An engine that reads and writes files itself: ``partitioned`` (one Parquet file in,
    one out, bounded memory) or ``ray`` (many Parquet, JSONL or CSV files in, a folder of
    Parquet parts out, and the per-group table with ``summary_path`` a folder of parts
    too). Each output is written beside its final path and renamed when complete."""
    from grpo_cli.core.resolve import resolve
    from grpo_cli.core.run_summary import response_id
    from grpo_cli.engines import FileJob, get_engine
    from grpo_cli.io.atomic import atomic_folder, atomic_path
    from grpo_cli.io.read import require_file
    from grpo_cli.jobs.outputs import normalized_format

    backend, force = job.request.engine.backend, job.force
    engine = cast("FileEngine", get_engine(backend))
    dataset = engine.info.io == "dataset"
    for path in job.paths:
        require_file(path, option("backend", backend, alias="" if dataset else "alone"))
    fmt = normalized_format(job.input_format)
    engine.require()  # the install hint before anything is read
    schema = _first_schema(job.paths[0], fmt, job.request.key_cols, dataset)
    plan = resolve(job.request, schema)  # the one resolution; every worker receives it
    (target,) = targets.paths
    with contextlib.ExitStack() as stack:
        out = stack.enter_context((atomic_folder if dataset else atomic_path)(target, force=force))
        summary = job.summary_path  # (a dataset engine's: a file engine takes none)
        files = FileJob(
            sources=tuple(job.paths),
            output=out,
            plan=plan,
            input_format=fmt,
            derived=plan.derived,
            groups=None
            if summary is None
            else stack.enter_context(atomic_folder(summary, force=force)),
            notes=job.notes,
            fatal=job.fatal,
            response=response_id(user_columns(schema), plan.options),
        )
        run = engine.annotate_files(files)
    return JobResult(
        options=plan.options,
        engine=plan.engine,
        layout=plan.layout if dataset else None,
        output=f"{target}/ (Parquet parts)" if dataset else f"{target} (parquet)",
        summary_path=job.summary_path,
        paths=(target,),
        figures=lambda: run,
        notices=run.engine_warnings,
    )


def _first_schema(
    first: Path, fmt: str | None, key_cols: tuple[str, ...], dataset: bool
) -> pl.Schema:
    """The columns of the first input, the others' are checked against as they are read
    (no rows: the values are checked where they are read). A file engine scans its one
    Parquet file (no rows: the other engines' error, not empty partitions)."""
    from grpo_cli.io.formats import format_from_suffix, scanned_format
    from grpo_cli.io.read import check_scanned_file, no_rows, read_rewards, scan_file

    scanned = scanned_format(first)
    if not dataset or (scanned and (fmt or format_from_suffix(first)) == scanned.name):
        # Ray reads other formats too: a damaged file gets the Polars engine's hint
        rows = check_scanned_file(first, None) if dataset else check_scanned_file(first)
        schema = scan_file(first).collect_schema()
        if not rows and not dataset:
            raise no_rows(str(first), list(schema))
        return schema
    # as the Polars engine reads it (a compressed or text file; its errors)
    return read_rewards(first, fmt, string_cols=list(key_cols)).frame.head(0).schema

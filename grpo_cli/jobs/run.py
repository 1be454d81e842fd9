"""``run_job``: one whole annotation job (read, compute, write) on any engine.

The job is the same whatever the engine: the options checked before any file is read,
the outputs checked (never an input, never clobbered without ``force``), what killed runs
left beside them removed, the engine run, and every output put in place atomically (all
of them or none). How the data is read, computed and written is the engine's, picked from
its registry entry (:data:`grpo_cli.core.engine_options.ENGINES` ``io``):

- ``"frame"`` (polars, torch): the inputs read into memory as one log (or standard
  input), annotated (:func:`grpo_cli.jobs.pipeline.annotate`), written to one output (a file
  or standard output) or one file per input (``out_dir``), with the per-group table.
- ``"file"`` (partitioned): one Parquet file in, one Parquet file out, bounded memory.
- ``"dataset"`` (ray): many files in, a folder of Parquet part files out, and the
  per-group table as a folder of parts.

For a frame already in memory, :func:`grpo_cli.compute_advantages` is the entry. This
module imports neither Typer nor Rich: the caller shows progress and notes through the
callbacks it passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from grpo_cli.core.columns import SOURCE_KEY
from grpo_cli.core.engine_options import EngineOptions
from grpo_cli.core.errors import GrpoAdvError, Message, OptionsError, OutputError, Verbatim, option
from grpo_cli.core.options import AdvantageOptions

if TYPE_CHECKING:
    from grpo_cli.core.estimators import Estimator
    from grpo_cli.core.plan import Plan
    from grpo_cli.core.run_summary import RunSummary
    from grpo_cli.engines import FileEngine
    from grpo_cli.jobs.pipeline import Resolved


__all__ = ["EngineOptions", "JobResult", "run_job"]


class Progress(Protocol):
    """A progress display: one line per stage (reading, computing, writing)."""

    def add(self, description: str, total: int) -> Any:
        """A new line of the display; its handle."""

    def advance(self, task: Any, steps: int = 1) -> None:
        """``steps`` more done on ``task``."""


class _NoProgress:
    def add(self, description: str, total: int) -> None:
        return None

    def advance(self, task: Any, steps: int = 1) -> None:
        return None


@contextlib.contextmanager
def _no_progress() -> Iterator[Progress]:
    yield _NoProgress()


@dataclass
class JobResult:
    """What a job did.

    Attributes:
        options: the options the job ran with (preset, layout and explicit choices merged).
        engine: where it ran.
        layout: the trainer dump layout the log was read in, or None.
        output: what was written, for people (``out.parquet (parquet)``, ``standard
            output``, ``OUT/ (Parquet parts)``, ``3 files: a ... c``).
        summary_path: where the per-group table went, or None.
        paths: the output files (or folder) written; empty for standard output.
        run: the run's figures (the CLI's summary table); on an in-memory engine computed
            on first use (one more pass over the rows, which a quiet caller never pays).
        warnings: what the user should know (a TRL group size inferred, groups spanning
            steps, ...), one message each; computed on first use too.
    """

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
        """The run's figures."""
        return self.figures()

    @cached_property
    def warnings(self) -> tuple[Message, ...]:
        """What the user should know, one message each."""
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
        progress: a factory of the progress display the in-memory engines advance.
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
    from grpo_cli.core.engine_options import ENGINES, split_engine

    if isinstance(options, AdvantageOptions):
        options = {f.name: getattr(options, f.name) for f in fields(options)}
    explicit, settings = split_engine(options or {})
    where = EngineOptions.of({**_settings(engine), **settings})
    sources = [str(source) for source in inputs]
    target = None if output is None else str(output)
    decided = check_options(preset, explicit, where)  # the job's one estimator lookup
    io = ENGINES[where.backend].io
    if summary_format is not None and (summary_path is None or io == "dataset"):
        raise OptionsError(
            option("summary_format")
            + " names the format of a "
            + option("summary_path")
            + " table",
            hint="give " + option("summary_path", Verbatim("PATH")) + " too"
            if summary_path is None
            else option("backend", where.backend)
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
            + option("backend", where.backend),
            hint="drop the logged column first, or name the new one with "
            + option("advantage_col"),
        )
    if io == "file":
        return _run_file(
            sources,
            decided,
            preset,
            explicit,
            target,
            out_dir,
            output_format,
            summary_path,
            force,
            warn,
        )
    if io == "dataset":
        return _run_dataset(
            sources,
            decided,
            preset,
            explicit,
            target,
            out_dir,
            input_format,
            output_format,
            summary_path,
            force,
            notes,
            warn,
            fatal,
        )
    with (progress or _no_progress)() as shown:
        return _run_frame(
            sources,
            decided,
            preset,
            explicit,
            replace,
            target,
            out_dir,
            input_format,
            output_format,
            summary_path,
            summary_format,
            force,
            span_check,
            shown,
            warn,
        )


def _settings(engine: EngineOptions | Mapping[str, Any] | None) -> dict[str, Any]:
    """The engine settings given, as a mapping."""
    if isinstance(engine, EngineOptions):
        return {f.name: getattr(engine, f.name) for f in fields(engine)}
    return dict(engine or {})


def _run_frame(
    sources: list[str],
    decided: Plan,
    preset: str | None,
    explicit: dict[str, Any],
    replace: bool,
    output: str | None,
    out_dir: Path | None,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    summary_format: str | None,
    force: bool,
    span_check: bool,
    progress: Progress,
    warn: Callable[[Message], None] | None,
) -> JobResult:
    """An in-memory engine: read, annotate, write (see :func:`run_job`)."""
    from grpo_cli.engines import start_loading
    from grpo_cli.io.atomic import atomic_writes
    from grpo_cli.io.read import expand_sources, read_many
    from grpo_cli.io.write import check_output_path, write_table
    from grpo_cli.jobs.outputs import (
        normalized_format,
        output_targets,
        protected_inputs,
        read_input,
        remove_leftovers,
        write_outputs,
    )
    from grpo_cli.jobs.pipeline import annotate

    if out_dir is not None and output is not None:
        raise OptionsError(
            "give " + option("output", short=True) + " or " + option("out_dir") + ", not both",
            hint=option("out_dir") + " writes one file per input",
        )
    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    paths = [] if sources == ["-"] else expand_sources(sources)
    start_loading(decided.engine.backend)  # torch imports while the log is read
    reading = progress.add("reading", total=max(len(paths), 1))
    if out_dir is not None:
        if not paths:
            raise OptionsError(option("out_dir") + " needs input files", hint="give files, not -")
        log = read_many(
            sources,
            normalized_format(input_format),
            string_cols=key_cols,
            source_col=SOURCE_KEY,
            on_file=lambda _: progress.advance(reading),
        )
    else:
        log = read_input(sources, input_format, key_cols)
        progress.advance(reading, len(paths) or 1)
    targets = output_targets(paths, log.format, output, output_format, out_dir, sources)
    protected = protected_inputs(sources)
    summary_to_stdout = summary_path is not None and str(summary_path) == "-"
    remove_leftovers(  # whatever this run's fate: before any refusal
        [path for path, _ in targets.values()] + [None if summary_to_stdout else summary_path],
        warn,
    )
    for path, _ in targets.values():
        if path is not None:
            check_output_path(path, force=force, protected=protected)
    if summary_to_stdout and any(path is None for path, _ in targets.values()):
        raise OptionsError(
            option("summary_path", Verbatim("-"))
            + " and the annotated output both go to standard output",
            hint="write the annotated log to a file with " + option("output", short=True),
        )
    if summary_path is not None and not summary_to_stdout:
        if any(
            path is not None and summary_path.resolve() == path.resolve()
            for path, _ in targets.values()
        ):
            raise OutputError(
                option("summary_path") + " and an output are the same file",
                hint="give them different paths",
                path=summary_path,
            )
        check_output_path(
            summary_path, force=force, protected=protected, flag=option("summary_path")
        )
    computing = progress.add("computing", total=1)
    result = annotate(
        log.frame,
        preset,
        replace=replace,
        span_check=span_check,
        looked_up=decided.estimator,
        engine=decided.engine,
        **explicit,
    )
    progress.advance(computing)
    writing = progress.add("writing", total=len(targets))
    with atomic_writes(force=force) as stage:  # every output lands, or none
        shown = write_outputs(result.frame, targets, stage, lambda: progress.advance(writing))
        if summary_path is not None:
            write_table(
                result.groups,
                summary_path,
                force=force,
                protected=protected,
                stage=stage,
                fmt=summary_format,
                flag=option("summary_path"),
            )
    return JobResult(
        result.options,
        decided.engine,
        result.layout,
        shown,
        summary_path,
        tuple(path for path, _ in targets.values() if path is not None),
        lambda: result.run,
        lambda: (*log.warnings, *result.warnings),
    )


def check_options(
    preset: str | None,
    explicit: dict[str, Any],
    engine: EngineOptions | None = None,
    estimator: Estimator | None = None,
) -> Plan:
    """The plan the options of a preset and the explicit choices make (on ``engine``),
    checked before any file is read or any output path looked at (an unknown estimator is
    a usage error, whatever the output): the estimator looked up (once: the job hands it
    on; ``estimator``: the caller looked it up already), what it needs of the options
    checked. The count of ``reward_weights`` is checked once a dump layout has named the
    reward columns."""
    from grpo_cli.core.estimators import get_estimator
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.core.plan import decide
    from grpo_cli.core.presets import merge_options
    from grpo_cli.jobs.pipeline import needs_length

    fields = merge_options(preset, explicit)
    if "reward_cols" not in explicit:
        fields.pop("reward_weights", None)
    if estimator is None:
        estimator = get_estimator(str(fields.get("estimator", "grpo")))
    if needs_length(fields, estimator):  # the log may hold one (pipeline.length_from_columns)
        fields["length_col"] = "length"
    options = AdvantageOptions(**fields)
    return decide(options, hashed=False, estimator=estimator, engine=engine)


def _run_file(
    sources: list[str],
    decided: Plan,
    preset: str | None,
    explicit: dict[str, Any],
    output: str | None,
    out_dir: Path | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    warn: Callable[[Message], None] | None,
) -> JobResult:
    """A file engine (``backend="partitioned"``): one Parquet file in, one Parquet file
    out, bounded memory."""

    import polars as pl

    from grpo_cli.core.plan import parquet_plan
    from grpo_cli.engines import FileJob, check, get_engine
    from grpo_cli.io.atomic import atomic_path
    from grpo_cli.io.formats import compression_for
    from grpo_cli.io.read import (
        check_scanned_file,
        expand_sources,
        no_rows,
        require_file,
        scan_file,
    )
    from grpo_cli.io.write import check_output_path
    from grpo_cli.jobs.outputs import output_target, remove_leftovers

    options = decided.options
    engine = get_engine(decided.engine.backend)
    check(engine, decided)  # before any file is looked at
    named = option("backend", decided.engine.backend, alias="alone")
    paths = [] if sources == ["-"] else expand_sources(sources)
    if len(paths) != 1 or out_dir is not None or summary_path is not None or output == "-":
        raise OptionsError(
            named + " reads one Parquet file and writes one Parquet file",
            hint="give one input file and "
            + option("output", Verbatim("OUT.parquet"), short=True)
            + " (no -, "
            + option("out_dir")
            + " or "
            + option("summary_path")
            + ")",
        )
    source = paths[0]
    require_file(source, named)
    rows = check_scanned_file(source)
    lazy = scan_file(source)
    schema = lazy.collect_schema()
    if not rows:  # the other engines' error (its partitions would be empty folders)
        raise no_rows(str(source), list(schema))
    _refuse_positional_layout(pl.DataFrame(schema=schema), preset, explicit, named)
    options = _within_steps(options, schema, explicit)
    plan = parquet_plan(lazy, options, decided.engine, estimator=decided.estimator)
    target, fmt = output_target([str(source)], output, output_format, "parquet")
    if target is None or fmt != "parquet" or compression_for(target) is not None:
        raise OptionsError(
            named + " writes Parquet (zstd-compressed inside)",
            hint="give " + option("output", Verbatim("OUT.parquet"), short=True),
        )
    remove_leftovers([target], warn)  # whatever this run's fate
    check_output_path(target, force=force, protected=[source])
    with atomic_path(target, force=force) as tmp:
        run = cast("FileEngine", engine).annotate_files(FileJob((source,), tmp, plan))
    return JobResult(
        options,
        decided.engine,
        None,
        f"{target} (parquet)",
        None,
        (target,),
        lambda: run,
        run.engine_warnings,
    )


def _within_steps(
    options: AdvantageOptions, columns: Collection[str], explicit: dict[str, Any]
) -> AdvantageOptions:
    """``options`` grouped within each step of a log with ``columns`` unless the group key
    is explicit (see :func:`grpo_cli.core.layouts.within_steps`)."""
    from grpo_cli.core.layouts import within_steps

    fields = within_steps(columns, {"group_cols": options.group_cols}, explicit.keys())
    return options.with_overrides(group_cols=fields["group_cols"])


def _run_dataset(
    sources: list[str],
    decided: Plan,
    preset: str | None,
    explicit: dict[str, Any],
    output: str | None,
    out_dir: Path | None,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    notes: Callable[[Message], None] | None,
    warn: Callable[[Message], None] | None,
    fatal: Callable[[GrpoAdvError], None] | None,
) -> JobResult:
    """A dataset engine (``backend="ray"``): many Parquet, JSONL or CSV files in, a folder
    of Parquet part files out (``output``), and with ``summary_path`` the per-group table
    as a folder of parts too. Each folder is written beside its final path and renamed
    when complete."""
    from grpo_cli.core.plan import make_plan
    from grpo_cli.core.run_summary import response_id
    from grpo_cli.engines import FileJob, check, get_engine
    from grpo_cli.io.atomic import atomic_folder, check_output_folder
    from grpo_cli.io.read import expand_sources, require_file
    from grpo_cli.jobs.outputs import normalized_format, remove_leftovers

    engine = get_engine(decided.engine.backend)
    check(engine, decided)  # before any file is looked at
    name = option("backend", decided.engine.backend)
    if sources == ["-"]:
        raise OptionsError(
            name + " reads files, not standard input",
            hint="give the log's files, folders or globs",
        )
    if output is None or output == "-" or out_dir is not None:
        raise OptionsError(
            name + " writes a folder of Parquet part files",
            hint="give the folder with " + option("output", Verbatim("OUT_DIR"), short=True),
        )
    if output_format not in (None, "parquet"):
        raise OptionsError(
            name + " writes Parquet part files", hint="drop " + option("output_format")
        )
    fmt = normalized_format(input_format)
    paths = expand_sources(sources)
    for path in paths:
        require_file(path, name)
    target = Path(output)
    remove_leftovers([target, summary_path], warn)  # whatever this run's fate
    check_output_folder(target, force=force, protected=paths)
    if summary_path is not None:
        if summary_path.resolve() == target.resolve():
            raise OutputError(
                option("summary_path")
                + " and "
                + option("output", short=True)
                + " are the same folder",
                hint="give them different paths",
                path=summary_path,
            )
        check_output_folder(summary_path, force=force, protected=paths)
    cast("FileEngine", engine).require()  # the install hint before anything is read
    resolved = _resolve_on_schema(paths[0], fmt, preset, explicit, name, decided.estimator)
    plan = make_plan(
        resolved.frame,
        resolved.options,
        hashed=False,
        estimator=resolved.estimator,
        engine=decided.engine,
    )
    response = response_id(resolved.frame.columns, resolved.options)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_folder(target, force=force))
        groups = (
            None
            if summary_path is None
            else stack.enter_context(atomic_folder(summary_path, force=force))
        )
        job = FileJob(
            tuple(paths), out, plan, fmt, resolved.derived, groups, notes, fatal, response
        )
        run = cast("FileEngine", engine).annotate_files(job)
    shown = f"{target}/ (Parquet parts)"
    return JobResult(
        resolved.options,
        decided.engine,
        resolved.layout,
        shown,
        summary_path,
        (target,),
        lambda: run,
        run.engine_warnings,
    )


def _resolve_on_schema(
    first: Path,
    fmt: str | None,
    preset: str | None,
    explicit: dict[str, Any],
    name: Message,
    estimator: Estimator,
) -> Resolved:
    """The preset, a dump layout and the explicit options resolved on the columns of the
    first input (no rows: the values are checked where they are read)."""
    import polars as pl

    from grpo_cli.io.formats import format_from_suffix, scanned_format
    from grpo_cli.io.read import check_scanned_file, read_rewards, scan_file
    from grpo_cli.jobs.pipeline import resolve

    scanned = scanned_format(first)
    if scanned is not None and (fmt or format_from_suffix(first)) == scanned.name:
        check_scanned_file(first)
        empty = pl.DataFrame(schema=scan_file(first).collect_schema())
    else:  # as the Polars engine reads it (a compressed or text file; its errors)
        key_cols = list(explicit.get("group_cols", ("prompt_id",)))
        empty = read_rewards(first, fmt, string_cols=key_cols).frame.head(0)
    _refuse_positional_layout(empty, preset, explicit, name)
    return resolve(empty, preset, explicit, estimator)


def _refuse_positional_layout(
    empty: Any, preset: str | None, explicit: dict[str, Any], name: Message
) -> None:
    """A TRL completions log has no prompt id: its groups are num_generations consecutive
    rows, which an engine that takes them in no order cannot form. Refused once, with the
    route that works."""
    from grpo_cli.core.layouts import detect_layout
    from grpo_cli.core.presets import get_preset

    layout = get_preset(preset).layout if preset else None
    grouping_given = "group_cols" in explicit or "group_size" in explicit
    if detect_layout(empty, layout) == "trl" and not grouping_given:
        raise OptionsError(
            name + " does not support a TRL completions log (its groups are "
            "num_generations consecutive rows, which need the rows in order)",
            hint="drop " + name + ": the default engine infers num_generations from the log",
        )

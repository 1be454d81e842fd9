"""``grpo-adv compute``: annotate a reward log with group-relative advantages."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from grpo_cli.cli.outputs import (
    normalized_format,
    output_target,
    output_targets,
    protected_inputs,
    read_input,
    remove_leftovers,
    sources_or_stdin,
    write_outputs,
)
from grpo_cli.cli.params import (
    Force,
    InputFormat,
    Output,
    OutputFormat,
    PolicyParams,
    Preset,
    Quiet,
    Sources,
    SummaryFormat,
    SummaryPath,
    policy_options,
)
from grpo_cli.columns import SOURCE_KEY
from grpo_cli.errors import OptionsError, OutputError

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.engines import FileEngine
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.pipeline import Resolved
    from grpo_cli.summary import RunSummary


@policy_options()
def compute_cmd(
    sources: Sources = None,
    output: Output = None,
    input_format: InputFormat = None,
    output_format: OutputFormat = None,
    preset: Preset = None,
    *,
    policy: PolicyParams,
    with_stats: Annotated[
        bool,
        typer.Option(
            "--with-stats", help="Also output group_size, group_mean and group_std columns."
        ),
    ] = False,
    advantage_col: Annotated[
        str, typer.Option("--advantage-col", metavar="COL", help="Name of the output column.")
    ] = "advantage",
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Recompute input columns named like the added ones (a trainer dump's own "
            "advantage column) in place, instead of refusing.",
        ),
    ] = False,
    summary_path: SummaryPath = None,
    summary_format: SummaryFormat = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out-dir",
            metavar="DIR",
            help="Write one annotated file per input into DIR (the inputs still form one log).",
            show_default=False,
        ),
    ] = None,
    low_memory: Annotated[
        bool,
        typer.Option(
            "--low-memory",
            help="Logs larger than memory: Parquet in, Parquet out, in bounded memory "
            "(spills partitions to a temporary folder beside the output; group-level "
            "estimators only). The same as --backend partitioned.",
        ),
    ] = False,
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Annotate a reward log with group-relative advantages.

    Every input row is kept, in order, with all its columns, plus an `advantage` column.
    """
    explicit = policy.explicit()
    if with_stats:
        explicit["with_stats"] = True
    explicit["advantage_col"] = advantage_col
    if low_memory:
        if explicit.get("backend", "partitioned") != "partitioned":
            raise OptionsError(
                f"--low-memory is --backend partitioned, not --backend {explicit['backend']}",
                hint="give one of them",
            )
        explicit["backend"] = "partitioned"
    _compute(
        sources_or_stdin(sources),
        preset,
        explicit,
        replace=replace,
        output=output,
        out_dir=out_dir,
        input_format=input_format,
        output_format=output_format,
        summary_path=summary_path,
        summary_format=summary_format,
        force=force,
        quiet=quiet,
    )


def _compute(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    *,
    replace: bool,
    output: str | None,
    out_dir: Path | None,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    summary_format: str | None,
    force: bool,
    quiet: bool,
) -> None:
    """Check every option, read, compute, write the outputs, then tell the user what
    happened. An engine that reads and writes files itself (``io="file"`` or ``"dataset"``
    in the engine registry) gets the input paths and the output path instead."""
    from grpo_cli.engines import ENGINES

    options = _check_options(preset, explicit)
    io = ENGINES[options.backend].io
    if summary_format is not None and (summary_path is None or io == "dataset"):
        raise OptionsError(
            "--summary-format names the format of a --summary table",
            hint="give --summary PATH too"
            if summary_path is None
            else f"--backend {options.backend} writes --summary as a folder of Parquet parts",
        )
    if summary_path is not None and io != "dataset":  # a dataset engine writes a folder
        from grpo_cli.io import table_format

        table_format(summary_path, summary_format)
    if replace and io != "frame":
        raise OptionsError(
            f"--replace works with the in-memory engines, not --backend {options.backend}",
            hint="drop the logged column first, or name the new one with --advantage-col",
        )
    if io == "file":
        _compute_files(
            sources,
            preset,
            explicit,
            output=output,
            out_dir=out_dir,
            output_format=output_format,
            summary_path=summary_path,
            force=force,
            quiet=quiet,
        )
        return
    if io == "dataset":
        _compute_dataset(
            sources,
            preset,
            explicit,
            output=output,
            out_dir=out_dir,
            input_format=input_format,
            output_format=output_format,
            summary_path=summary_path,
            force=force,
            quiet=quiet,
        )
        return
    from grpo_cli.io import (
        atomic_writes,
        check_output_path,
        expand_sources,
        read_many,
        write_table,
    )
    from grpo_cli.pipeline import annotate
    from grpo_cli.render import DelayedProgress, stderr_console

    if out_dir is not None and output is not None:
        raise OptionsError(
            "give -o or --out-dir, not both", hint="--out-dir writes one file per input"
        )
    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    paths = [] if sources == ["-"] else expand_sources(sources)
    console = stderr_console()
    with DelayedProgress(console, enabled=console.is_terminal and not quiet) as progress:
        reading = progress.add("reading", total=max(len(paths), 1))
        if out_dir is not None:
            if not paths:
                raise OptionsError("--out-dir needs input files", hint="give files, not -")
            fmt = normalized_format(input_format)
            log = read_many(
                sources,
                fmt,
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
            console,
            [path for path, _ in targets.values()] + [None if summary_to_stdout else summary_path],
            quiet=quiet,
        )
        for path, _ in targets.values():
            if path is not None:
                check_output_path(path, force=force, protected=protected)
        if summary_to_stdout and any(path is None for path, _ in targets.values()):
            raise OptionsError(
                "--summary - and the annotated output both go to standard output",
                hint="write the annotated log to a file with -o",
            )
        if summary_path is not None and not summary_to_stdout:
            if any(
                path is not None and summary_path.resolve() == path.resolve()
                for path, _ in targets.values()
            ):
                raise OutputError(
                    "--summary and an output are the same file", hint="give them different paths"
                )
            check_output_path(summary_path, force=force, protected=protected, flag="--summary")
        computing = progress.add("computing", total=1)
        result = annotate(log.frame, preset, replace=replace, span_check=not quiet, **explicit)
        progress.advance(computing)
        writing = progress.add("writing", total=len(targets))
        with atomic_writes(force=force) as stage:  # every output lands, or none
            shown_output = write_outputs(
                result.frame, targets, stage, lambda: progress.advance(writing)
            )
            if summary_path is not None:
                write_table(
                    result.groups,
                    summary_path,
                    force=force,
                    protected=protected,
                    stage=stage,
                    fmt=summary_format,
                    flag="--summary",
                )
    if not quiet:
        _report(
            console,
            result.run,
            result.options,
            result.warnings,
            preset,
            result.layout,
            shown_output,
            summary_path,
        )


def _check_options(preset: str | None, explicit: dict[str, Any]) -> AdvantageOptions:
    """The options a preset and the explicit choices make, checked before any file is
    read or any output path looked at (an unknown estimator is a usage error, whatever
    the output). The count of --reward-weights is checked once a dump layout has named
    the reward columns."""
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.pipeline import needs_length
    from grpo_cli.plan import decide
    from grpo_cli.presets import merge_options

    fields = merge_options(preset, explicit)
    if "reward_cols" not in explicit:
        fields.pop("reward_weights", None)
    if needs_length(fields):  # the log may hold one (see pipeline.length_from_columns)
        fields["length_col"] = "length"
    options = AdvantageOptions(**fields)
    decide(options, hashed=False)  # what the estimator needs of the options, checked now
    return options


def _compute_files(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    *,
    output: str | None,
    out_dir: Path | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    quiet: bool,
) -> None:
    """A file engine (``--backend partitioned``, alias ``--low-memory``): one Parquet file
    in, one Parquet file out, bounded memory."""

    import polars as pl

    from grpo_cli.engines import FileJob, check, get_engine
    from grpo_cli.io import (
        atomic_path,
        check_output_path,
        check_parquet_file,
        compression_for,
        expand_sources,
    )
    from grpo_cli.plan import decide, parquet_plan
    from grpo_cli.render import stderr_console

    options = _check_options(preset, explicit)
    engine = get_engine(options.backend)
    check(engine, decide(options, hashed=False))  # before any file is looked at

    paths = [] if sources == ["-"] else expand_sources(sources)
    if len(paths) != 1 or out_dir is not None or summary_path is not None or output == "-":
        raise OptionsError(
            "--low-memory reads one Parquet file and writes one Parquet file",
            hint="give one input file and -o OUT.parquet (no -, --out-dir or --summary)",
        )
    source = paths[0]
    from grpo_cli.io import read_rewards

    if not source.is_file():
        read_rewards(source)  # raises the usual missing / folder / permission error
    check_parquet_file(source)
    options = _within_steps(options, pl.read_parquet_schema(source), explicit)
    plan = parquet_plan(source, options)
    target, fmt = output_target([str(source)], output, output_format, "parquet")
    if target is None or fmt != "parquet" or compression_for(target) is not None:
        raise OptionsError(
            "--low-memory writes Parquet (zstd-compressed inside)", hint="give -o OUT.parquet"
        )
    console = stderr_console()
    remove_leftovers(console, [target], quiet=quiet)  # whatever this run's fate
    check_output_path(target, force=force, protected=[source])
    with atomic_path(target, force=force) as tmp:
        run = cast("FileEngine", engine).annotate_files(FileJob((source,), tmp, plan))
    if not quiet:
        _report(console, run, options, (), preset, None, f"{target} (parquet)", None)


def _within_steps(
    options: AdvantageOptions, columns: Collection[str], explicit: dict[str, Any]
) -> AdvantageOptions:
    """``options`` grouped within each step of a log with ``columns`` unless the group key
    is explicit (see :func:`grpo_cli.layouts.within_steps`)."""
    from grpo_cli.layouts import within_steps

    fields = within_steps(columns, {"group_cols": options.group_cols}, explicit.keys())
    return options.with_overrides(group_cols=fields["group_cols"])


def _compute_dataset(
    sources: list[str],
    preset: str | None,
    explicit: dict[str, Any],
    *,
    output: str | None,
    out_dir: Path | None,
    input_format: str | None,
    output_format: str | None,
    summary_path: Path | None,
    force: bool,
    quiet: bool,
) -> None:
    """A dataset engine (``--backend ray``): many Parquet, JSONL or CSV files in, a folder
    of Parquet part files out (``-o DIR``), and with ``--summary DIR`` the per-group table
    as a folder of parts too. Each folder is written beside its final path and renamed
    when complete."""
    import contextlib
    import functools

    from grpo_cli.engines import FileJob, check, get_engine
    from grpo_cli.io import atomic_folder, check_output_folder, expand_sources
    from grpo_cli.plan import decide, make_plan
    from grpo_cli.render import print_note, stderr_console

    options = _check_options(preset, explicit)
    engine = get_engine(options.backend)
    check(engine, decide(options, hashed=False))  # before any file is looked at
    name = f"--backend {options.backend}"
    if sources == ["-"]:
        raise OptionsError(
            f"{name} reads files, not standard input", hint="give the log's files, folders or globs"
        )
    if output is None or output == "-" or out_dir is not None:
        raise OptionsError(
            f"{name} writes a folder of Parquet part files", hint="give the folder with -o OUT_DIR"
        )
    if output_format not in (None, "parquet"):
        raise OptionsError(f"{name} writes Parquet part files", hint="drop --output-format")
    fmt = normalized_format(input_format)
    paths = expand_sources(sources)
    target = Path(output)
    console = stderr_console()
    remove_leftovers(console, [target, summary_path], quiet=quiet)  # whatever this run's fate
    check_output_folder(target, force=force, protected=paths)
    if summary_path is not None:
        if summary_path.resolve() == target.resolve():
            raise OutputError(
                "--summary and -o are the same folder", hint="give them different paths"
            )
        check_output_folder(summary_path, force=force, protected=paths)
    cast("FileEngine", engine).require()  # the install hint before anything is read
    resolved = _resolve_on_schema(paths[0], fmt, preset, explicit)
    plan = make_plan(resolved.frame, resolved.options, hashed=False)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_folder(target, force=force))
        groups = (
            None
            if summary_path is None
            else stack.enter_context(atomic_folder(summary_path, force=force))
        )
        notes = None if quiet else functools.partial(print_note, console)
        job = FileJob(tuple(paths), out, plan, fmt, resolved.derived, groups, notes)
        run = cast("FileEngine", engine).annotate_files(job)
    if not quiet:
        shown = f"{target}/ (Parquet parts)"
        _report(console, run, resolved.options, (), preset, resolved.layout, shown, summary_path)


def _resolve_on_schema(
    first: Path, fmt: str | None, preset: str | None, explicit: dict[str, Any]
) -> Resolved:
    """The preset, a dump layout and the explicit options resolved on the columns of the
    first input (no rows: the values are checked where they are read)."""
    import polars as pl

    from grpo_cli.io import format_from_suffix, read_rewards, uncompressed_name
    from grpo_cli.pipeline import resolve

    if (fmt or format_from_suffix(uncompressed_name(first))) == "parquet":
        from grpo_cli.io import check_parquet_file

        check_parquet_file(first)
        empty = pl.DataFrame(schema=pl.read_parquet_schema(first))
    else:
        key_cols = list(explicit.get("group_cols", ("prompt_id",)))
        empty = read_rewards(first, fmt, string_cols=key_cols).frame.head(0)
    _refuse_positional_layout(empty, preset, explicit)
    return resolve(empty, preset, explicit)


def _refuse_positional_layout(empty: Any, preset: str | None, explicit: dict[str, Any]) -> None:
    """A TRL completions log has no prompt id: its groups are num_generations consecutive
    rows, which a dataset engine (rows in no order) cannot form. Refused once, with the
    route that works."""
    from grpo_cli.layouts import detect_layout
    from grpo_cli.presets import get_preset

    layout = get_preset(preset).layout if preset else None
    grouping_given = "group_cols" in explicit or "group_size" in explicit
    if detect_layout(empty, layout) == "trl" and not grouping_given:
        raise OptionsError(
            "--backend ray does not support a TRL completions log (its groups are "
            "num_generations consecutive rows, which need the rows in order)",
            hint="drop --backend ray: the default engine infers num_generations from the log",
        )


def _report(
    console: Console,
    run: RunSummary,
    options: AdvantageOptions,
    warnings: tuple[str, ...],
    preset: str | None,
    layout: str | None,
    output: str,
    summary_path: Path | None,
) -> None:
    """Warnings and the summary table on stderr."""
    from grpo_cli.render import print_warning, render_run_summary

    for warning in warnings:
        print_warning(console, warning)
    if run.null_rewards:
        fate = {"exclude": "their advantage is null", "zero": "their advantage is 0"}.get(
            options.nulls, ""
        )
        print_warning(
            console,
            f"{run.null_rewards:,} null or NaN reward(s): left out of the statistics; {fate}",
        )
    render_run_summary(
        console,
        run,
        options,
        output=output,
        group_table_path=None if summary_path is None else str(summary_path),
        preset=preset,
        layout=layout,
    )

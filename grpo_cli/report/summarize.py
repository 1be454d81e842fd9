"""``summarize``: metrics of a reward log per group, per batch value (e.g. per step) and
overall, under the names the trainers log them (rendered by :mod:`grpo_cli.cli.render`).

Every metric is over the reward the estimator sees (the weighted sum of the reward columns,
NaN as null), with groups as ``compute`` forms them: the figures of
:mod:`grpo_cli.core.metrics`, the pass figures for binary rewards, the advantage figures on
annotated input. A group is counted in every batch value where it has rows, its statistics
over all its rows. Groups that span the batch column are refused; groups that span the
step column give a warning (:func:`grpo_cli.core.run_summary.span_warnings`).

A Parquet log over PIECE_ROWS rows is read in pieces of whole groups, only the columns the
report needs (:mod:`grpo_cli.report.pieces`): each piece summarized by the same code, the
partials merged, the trainers' figures in one streaming pass; the histograms' values and
the group sizes drawn are then those of the first piece, a sample of whole groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import polars as pl

from grpo_cli.core import metrics
from grpo_cli.core.columns import REWARD_KEY, SIZE_KEY, UNUSED_OUTPUT, VALID_KEY, span_flag_column
from grpo_cli.core.errors import InputError, Message, OptionsError, Verbatim, option
from grpo_cli.core.grouping import PROFILE_COLUMNS, profile_windows
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import (
    Keys,
    Plan,
    collision_columns,
    hash_columns,
    run_with_fallback,
    span_flag,
    with_keys,
)
from grpo_cli.core.presets import get_preset
from grpo_cli.core.rewards import combined_reward
from grpo_cli.core.run_summary import DISPLAY_NAMES, check_batch_spans, group_table, span_warnings

if TYPE_CHECKING:
    from grpo_cli.core.resolve import Request

LEVELS: Final = ("step", "group", "overall")
# The tables' columns after ``by``: the metrics' figures but two only compute's summary shows.
TABLE_COLUMNS: Final = tuple(
    name for name in metrics.FIGURES if name not in ("zero_std_group_share", "batches")
)


@dataclass(frozen=True)
class Report:
    """What ``summarize`` shows.

    Attributes:
        overall: one row of metrics over the whole log.
        steps: one row of metrics per value of ``by`` (empty without ``by``).
        group_rows: makes the ``groups`` table on first use (only ``--level group`` needs it).
        group_sizes: ``size`` and ``std`` of every group (what ``plot`` draws).
        binary: every valid reward is 0 or 1 (the pass metrics are present).
        annotated: the input has the advantage column (the advantage metrics are present).
        rewards, advantages: the valid values, for histograms (advantages: None if absent).
        methods: a ``compare`` output's advantages by method (:func:`compared_advantages`).
        sampled: ``rewards``, ``advantages``, ``group_sizes`` and ``methods`` are a sample
            of whole groups (a big log's first piece: :mod:`grpo_cli.report.pieces`).
    """

    overall: pl.DataFrame
    steps: pl.DataFrame
    group_rows: Callable[[], pl.DataFrame]
    group_sizes: pl.DataFrame
    by: tuple[str, ...]
    binary: bool
    annotated: bool
    rewards: pl.Series
    advantages: pl.Series | None
    warnings: tuple[Message, ...] = ()
    methods: dict[str, pl.Series] = field(default_factory=dict)
    sampled: bool = False

    @property
    def sample_note(self) -> str:
        """What a count of the sampled values adds: ``, a sample of whole groups`` or
        nothing."""
        return ", a sample of whole groups" if self.sampled else ""

    @cached_property
    def groups(self) -> pl.DataFrame:
        """One row per group: key, batch values, size, n_null, mean, std, min, max,
        zero_std (and advantage_mean on annotated input)."""
        return self.group_rows()

    def table(self, level: str) -> pl.DataFrame:
        """The table of ``level`` (step, group or overall)."""
        if level not in LEVELS:
            raise OptionsError(
                "unknown " + option("level") + f" {level!r}",
                hint=f"choose {', '.join(LEVELS)}",
                value=level,
            )
        if level == "step" and not self.by:
            raise OptionsError(
                option("level", "step") + " needs a batch column",
                hint="give "
                + option("by", (Verbatim("COL"),))
                + " (e.g. "
                + option("by", ("step",))
                + ")",
            )
        if level == "group":
            return self.groups
        return self.steps if level == "step" else self.overall


@dataclass(frozen=True)
class SummaryResult:
    """What :func:`run_summarize` did: the ``report`` (under the preset's trainer's names),
    the ``level`` of ``table`` (None unless written or asked for) and where it was
    ``written`` (``standard output``, the path, or None)."""

    report: Report
    level: str
    table: pl.DataFrame | None
    written: str | None


def run_summarize(
    inputs: Sequence[str | Path],
    output: str | Path | None = None,
    *,
    preset: str | None = None,
    options: Mapping[str, Any] | None = None,
    by: Sequence[str] | None = None,
    level: str | None = None,
    input_format: str | None = None,
    output_format: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> SummaryResult:
    """Summarize the log in ``inputs`` (what ``grpo-adv summarize`` runs) into a
    :class:`Report` under the preset's trainer's names (:func:`metrics.trainer_names`).

    Args:
        inputs: the log's files, folders or globs, read as one log; empty: standard input
            when it is a pipe or a file.
        output: where the ``level`` table goes (``"-"``: standard output; its format checked
            before any input is read), or None.
        preset: a trainer preset, or None.
        options: the CLI's keywords (``advantage_col``: None detects it), over the preset's.
        by: the per-step columns; None: the batch column, else ``step``.
        level: step, group or overall; None: step with a per-step column, else overall.
        input_format, output_format: formats when the suffixes do not say.
        force: overwrite an existing ``output`` (never an input).
        warn: where removed leftovers of killed runs are reported, or None.
    """
    from grpo_cli.io.formats import table_format
    from grpo_cli.io.write import write_table
    from grpo_cli.jobs.outputs import input_paths, remove_leftovers, sources_or_stdin

    sources = sources_or_stdin([str(source) for source in inputs])
    target = None if output is None else Path(output)
    to_stdout = target is not None and str(target) == "-"
    if target is not None:
        table_format(target, output_format)  # before any input is read
    paths = input_paths(sources)
    report = read_report(paths, preset, dict(options or {}), input_format, by)
    trainer = get_preset(preset).trainer if preset else None
    report = replace(
        report,
        overall=metrics.trainer_names(report.overall, trainer),
        steps=metrics.trainer_names(report.steps, trainer),
    )
    chosen = level or ("step" if report.by else "overall")
    table = report.table(chosen) if target is not None or level is not None else None
    written = None
    if target is not None:
        assert table is not None
        if not to_stdout:
            remove_leftovers([target], warn)
        write_table(table, target, force=force, protected=paths, fmt=output_format)
        written = "standard output" if to_stdout else str(target)
    return SummaryResult(report, chosen, table, written)


def read_report(
    paths: list[Path],
    preset: str | None,
    explicit: Mapping[str, Any],
    input_format: str | None,
    by: Sequence[str] | None,
) -> Report:
    """Read ``paths`` (none: standard input) and build their report (``summarize``,
    ``plot``): the options resolved on the log, a dump logged once per generation read once,
    the advantage column detected when ``explicit`` names none and read as one value per
    response (:mod:`grpo_cli.core.layouts`)."""
    from grpo_cli.core.columns import logged_advantage
    from grpo_cli.core.layouts import once_per_generation, per_response
    from grpo_cli.core.resolve import derive, make_request, resolve
    from grpo_cli.jobs.outputs import normalized_format, read_input
    from grpo_cli.report.pieces import big_log

    request = make_request(preset, {**explicit, "advantage_col": UNUSED_OUTPUT})
    big = big_log(paths, normalized_format(input_format))
    if big is not None and request.layout is None:
        report = _read_pieces(*big, request, explicit, tuple(by) if by else None)
        if report is not None:
            return report
    log = read_input(paths, input_format, request.key_cols)
    column = logged_advantage(log.frame.columns, explicit.get("advantage_col"))
    frame, tokens = per_response(log.frame, column)
    frame, repeated = once_per_generation(frame, request.layout)
    plan = resolve(request, frame)
    options = plan.options.with_overrides(advantage_col=column)
    report = summarize(derive(frame, plan), options, tuple(by) if by else None, plan=plan)
    once = [note for note in (tokens, repeated) if note]
    return replace(report, warnings=(*log.warnings, *plan.notes, *once, *report.warnings))


def _read_pieces(
    path: Path,
    rows: int,
    request: Request,
    explicit: Mapping[str, Any],
    by: tuple[str, ...] | None,
) -> Report | None:
    """The report of the big Parquet log ``path`` (``rows`` rows) in bounded memory: only
    the columns it reads, in pieces of whole groups (:mod:`grpo_cli.report.pieces`), each
    summarized in memory by :func:`summarize`'s own code, their partials merged; the
    trainers' figures in one streaming pass. None when its groups are not formed by its
    columns alone (a derived key) or its advantage column holds lists: read whole."""
    from grpo_cli.core.columns import logged_advantage
    from grpo_cli.core.metrics import LENGTH_COLUMNS
    from grpo_cli.core.plan import step_column
    from grpo_cli.core.resolve import resolve
    from grpo_cli.core.run_summary import response_id
    from grpo_cli.engines.narrow import needed_columns
    from grpo_cli.io.read import scan_file
    from grpo_cli.report.pieces import ROW, read_pieces

    schema = scan_file(path).collect_schema()
    column = logged_advantage(schema.names(), explicit.get("advantage_col"))
    plan = resolve(request, schema)
    if plan.derived or isinstance(schema.get(column), pl.List):
        return None
    options = plan.options.with_overrides(advantage_col=column)
    by = _summary_by(schema.names(), options, by)
    names = schema.names()
    methods = [c for c in names if c.startswith("advantage_")]  # a compare output's
    optional = [step_column(plan), response_id(names, options), options.length_col, column]
    wanted = [*plan.keys.exact, *needed_columns(options), *by, *optional, *LENGTH_COLUMNS]
    columns = [c for c in dict.fromkeys([*wanted, *methods]) if c is not None and c in schema]

    def summaries() -> Iterator[tuple[_PieceSummary, tuple[Message, ...]]]:
        # Each step whole in one piece where groups lie within steps: disjoint partials.
        spread = by if by and set(by) <= set(plan.keys.exact) else None
        for piece in read_pieces(path, rows, columns, plan.keys.exact, spread):
            piece_plan = resolve(request, piece.drop(ROW))  # its values checked
            summary = _piece_summary(
                piece,
                options,
                by,
                plan=piece_plan,
                pass_rates=True,
                order=ROW,
                trainer_figures=False,
            )
            yield summary, piece_plan.notes

    def group_rows() -> pl.DataFrame:  # read again, only when asked
        tables = [summary.report.groups for summary, _ in summaries() if summary.report]
        return pl.concat(tables).sort(ROW).drop(ROW)

    first: _PieceSummary | None = None  # its values kept, not its rows
    merged: list[_PieceSummary] = []  # the others' summaries, merged as they come
    pending: list[_PieceSummary] = []
    notes: list[Message] = []
    for summary, piece_notes in summaries():
        notes += piece_notes
        if first is None:
            report = summary.report and replace(summary.report, group_rows=group_rows)
            first = replace(summary, report=report)
            continue
        pending.append(replace(summary, report=None))
        # Merged once the pending partials outnumber the merged ones: linear in the steps
        # where pieces hold disjoint steps (the merged table doubles), every 2 pieces where
        # each holds every step.
        if sum(p.per_by.height for p in pending) > sum(p.per_by.height for p in merged):
            merged, pending = [_fold([*merged, *pending], by)], []
    assert first is not None  # a big log has pieces
    adv = column if column in schema else None
    aggs = metrics.trainer_aggs(columns, options.reward_cols, options.length_col, adv)
    pieces = [first, *merged, *pending]
    report = _report(pieces, _trainer_figures(scan_file(path), aggs, by, "streaming"))
    return replace(report, warnings=(*dict.fromkeys(notes), *report.warnings))


def summarize(
    frame: pl.DataFrame,
    options: AdvantageOptions,
    by: tuple[str, ...] | None = None,
    *,
    plan: Plan | None = None,
) -> Report:
    """The :class:`Report` of a raw or annotated reward log (see the module docstring);
    ``by``: None is the batch column, else ``step`` if present; ``plan``: the options
    resolved on ``frame`` with no advantage column written, if the caller has them."""
    piece = _piece_summary(frame, options, by, plan=plan)
    return _report([piece], piece.extra)


@dataclass(frozen=True)
class _PieceSummary:
    """What :func:`summarize` reads off one piece of a log (every group whole in it): the
    partials per value of ``by`` (``per_by``; one row without ``by``) and, with ``by``,
    those counted once per group (``groups``), the trainers' figures (``extra``: plain
    aggregations, not partials: a piece is the whole log or they come from a streaming
    pass over it), whether it has a valid reward (``scored``), and the rest of a
    :class:`Report` (None: kept for the first piece only, its values and group table
    being a piece's size)."""

    per_by: pl.DataFrame
    groups: pl.DataFrame | None
    extra: tuple[pl.DataFrame, pl.DataFrame] | None
    binary: bool
    scored: bool
    warnings: tuple[Message, ...]
    report: Report | None


# The partials only binary rewards have (dropped where a piece has other rewards).
_PASS_PARTIALS: Final = (
    metrics.SCORED_GROUPS,
    metrics.PASSING_GROUPS,
    metrics.SOLVED_GROUPS,
    metrics.FAILED_GROUPS,
    metrics.GROUP_MEAN_SUM,
)


def _piece_summary(
    frame: pl.DataFrame,
    options: AdvantageOptions,
    by: tuple[str, ...] | None,
    *,
    plan: Plan | None = None,
    pass_rates: bool | None = None,
    order: str | None = None,
    trainer_figures: bool = True,
) -> _PieceSummary:
    """The :class:`_PieceSummary` of ``frame``; ``pass_rates``: compute the pass partials
    (None: when its rewards are binary); ``order``: a column of ``frame`` the group table
    keeps (each group's first value) to order the groups of several pieces by;
    ``trainer_figures``: compute ``extra`` (not for a piece of a big log: its streaming
    pass gives them, and a piece's would be one row per step held for nothing)."""
    if options.aggregation != "sum_then_normalize" or options.step_rewards_col is not None:
        raise OptionsError(
            "summarize works on outcome rewards combined by a weighted sum",
            hint="drop "
            + option("estimator", "process")
            + " / "
            + option("aggregation", "normalize_then_sum"),
        )
    by = _summary_by(frame.columns, options, by)
    annotated = options.advantage_col in frame.columns
    if plan is None:
        from grpo_cli.core.resolve import make_request, resolve

        unused = options.with_overrides(advantage_col=UNUSED_OUTPUT)
        plan = resolve(make_request(options=unused), frame)
    flagged = _flagged_columns(frame, plan, by)
    prepared, used = run_with_fallback(lambda chosen: _prepare(frame, chosen, flagged), plan)
    keys = used.keys
    check_batch_spans(prepared, used)
    rewards = prepared[REWARD_KEY].drop_nulls()
    binary = rewards.len() > 0 and bool(rewards.is_in([0.0, 1.0]).all())
    adv = options.advantage_col if annotated else None
    if adv is not None and not prepared.schema[adv].is_numeric():
        raise InputError(
            f"column {adv!r} is {prepared.schema[adv]}, not numbers",
            hint=option("advantage_col") + " names the logged advantage column",
            column=adv,
        )
    passes = binary if pass_rates is None else pass_rates
    per_by, groups, profiles = _partials(prepared, keys, by, passes, adv, options.deterministic)
    aggs = metrics.trainer_aggs(frame.columns, options.reward_cols, options.length_col, adv)
    report = Report(
        overall=pl.DataFrame(),
        steps=pl.DataFrame(),
        group_rows=lambda: _group_rows(prepared, used, by, adv, order),
        group_sizes=_sizes_and_stds(profiles, options.ddof),
        by=by,
        binary=binary,
        annotated=annotated,
        rewards=rewards,
        advantages=prepared[adv].cast(pl.Float64).drop_nulls().drop_nans() if adv else None,
        warnings=span_warnings(prepared, used),
        methods=compared_advantages(frame),
    )
    extra = _trainer_figures(prepared.lazy(), aggs, by, "in-memory") if trainer_figures else None
    return _PieceSummary(per_by, groups, extra, binary, rewards.len() > 0, report.warnings, report)


def _summary_by(
    columns: Sequence[str], options: AdvantageOptions, by: tuple[str, ...] | None
) -> tuple[str, ...]:
    """The per-step columns: ``by``; None: the batch column, else ``step`` if present."""
    if by is None:
        step = ("step",) if "step" in columns else ()
        by = (options.batch_col,) if options.batch_col else step
    missing = [c for c in by if c not in columns]
    if missing:
        raise InputError(
            f"no column {missing[0]!r} to summarize by",
            hint=f"columns are: {', '.join(columns[:12])}",
        )
    return by


def _trainer_figures(
    rows: pl.LazyFrame,
    aggs: list[pl.Expr],
    by: tuple[str, ...],
    engine: Literal["in-memory", "streaming"],
) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """The trainers' figures (:func:`metrics.trainer_aggs`) of ``rows`` overall and per
    value of ``by`` (empty without ``by``), collected by ``engine``; None without any."""
    if not aggs:
        return None
    overall = rows.select(aggs).collect(engine=engine)
    steps = rows.group_by(list(by)).agg(aggs).collect(engine=engine) if by else pl.DataFrame()
    return overall, steps


def _fold(pieces: Sequence[_PieceSummary], by: tuple[str, ...]) -> _PieceSummary:
    """Pieces' summaries as one, as :func:`_report` reads them (partials per value of
    ``by`` merged; binary when every scored piece is)."""
    binary = all(p.binary or not p.scored for p in pieces)

    def merged(frames: list[pl.DataFrame], keys: tuple[str, ...]) -> pl.DataFrame:
        frames = [f if binary else f.drop(_PASS_PARTIALS, strict=False) for f in frames]
        return metrics.merge(frames, keys, sort=False)  # _report sorts the finished table

    first = pieces[0]
    groups = [p.groups for p in pieces if p.groups is not None]
    return replace(
        first,
        per_by=merged([p.per_by for p in pieces], by),
        groups=merged(groups, ()) if groups else None,
        binary=binary and any(p.binary for p in pieces),
        scored=any(p.scored for p in pieces),
        warnings=tuple(dict.fromkeys(w for p in pieces for w in p.warnings)),
    )


def _report(
    pieces: Sequence[_PieceSummary], extra: tuple[pl.DataFrame, pl.DataFrame] | None
) -> Report:
    """The :class:`Report` of a log from its pieces' summaries (each group whole in one
    piece; one piece: the log) and its trainers' figures (``extra``): the partials merged
    and finished; the group table, sizes, histograms' values and compared methods are the
    first piece's (the log's, or a sample of its whole groups)."""
    first = pieces[0].report
    assert first is not None  # the first piece's is kept
    by = first.by
    binary = all(p.binary or not p.scored for p in pieces) and any(p.binary for p in pieces)

    def merged(frames: list[pl.DataFrame], keys: tuple[str, ...]) -> pl.DataFrame:
        frames = [f.drop(_PASS_PARTIALS, strict=False) if not binary else f for f in frames]
        return frames[0] if len(frames) == 1 else metrics.merge(frames, keys, sort=False)

    per_by = [p.per_by for p in pieces]
    if by:
        # Merged once and unsorted (248,820 steps at 1B rows, about 1 KB each: a sorted
        # copy cost 260 MB at the peak); the finished table, narrower, is sorted.
        per_step = merged(per_by, by)
        rows = metrics.merge(per_step.drop(metrics.GROUP_PARTIALS, strict=False))
        groups = merged([p.groups for p in pieces if p.groups is not None], ())
        overall = _table(pl.concat([rows, groups], how="horizontal"), ())
        steps = _table(per_step, by).sort(list(by))
    else:
        overall, steps = _table(merged(per_by, ()), ()), pl.DataFrame()
    if extra is not None:
        overall = pl.concat([overall, extra[0]], how="horizontal")
        if by:
            steps = steps.join(extra[1], on=list(by), how="left", maintain_order="left")
    warnings = tuple(dict.fromkeys(w for p in pieces for w in p.warnings))
    return replace(
        first,
        overall=overall,
        steps=steps,
        binary=binary,
        warnings=warnings,
        sampled=len(pieces) > 1,
    )


def compared_advantages(frame: pl.DataFrame) -> dict[str, pl.Series]:
    """The advantages of a ``compare`` output by method (its numeric ``advantage_<method>``
    columns, nulls and NaNs left out), when it has two or more; else empty."""
    prefix = "advantage_"
    columns = [
        c for c, dtype in frame.schema.items() if c.startswith(prefix) and dtype.is_numeric()
    ]
    if len(columns) < 2:
        return {}
    return {
        c.removeprefix(prefix): frame[c].cast(pl.Float64).drop_nulls().drop_nans() for c in columns
    }


def _flagged_columns(frame: pl.DataFrame, plan: Plan, by: tuple[str, ...]) -> tuple[str, ...]:
    """The columns :func:`_prepare` flags groups spanning: the one ``by`` column and the
    step column, those without nulls."""
    wanted = [*by[:1], *([plan.span_col] if plan.span_col else [])]
    if len(by) > 1 or not wanted:
        return ()
    nulls = frame.select(pl.col(c).null_count() for c in dict.fromkeys(wanted)).row(0)
    return tuple(c for c, n in zip(dict.fromkeys(wanted), nulls, strict=True) if not n)


def _prepare(frame: pl.DataFrame, plan: Plan, flagged: tuple[str, ...] = ()) -> pl.DataFrame:
    """Every row with its reward, its group's profile (groups as ``compute`` forms them)
    and whether its group spans each ``flagged`` column, in one grouping pass."""
    keys = plan.keys
    rows = with_keys(frame.lazy(), plan.options).with_columns(
        *hash_columns(keys), combined_reward(plan.options).alias(REWARD_KEY)
    )
    size = pl.len().over(list(keys.group))  # the profile's SIZE_KEY window
    schema = frame.collect_schema()
    flags = [
        span_flag(column, keys.group, size if schema[column].is_integer() else None)
        for column in flagged
    ]
    profile = profile_windows(keys.group, ddof=1)  # the trainers' group std (ddof 1)
    rows = rows.with_columns(*profile, *collision_columns(keys), *flags)
    return rows.collect()


def _one_row_per_group(
    prepared: pl.DataFrame, keys: Keys, by: tuple[str, ...], columns: list[str]
) -> pl.DataFrame | None:
    """One row per (value of ``by``, group) with ``columns`` when no group spans the one
    ``by`` column: each group's first row (6x cheaper than grouping); else None."""
    if len(by) > 1:
        return None
    if by:
        flag = span_flag_column(by[0])
        if flag not in prepared.columns or prepared.get_column(flag).any():
            return None
    first = (
        pl.struct(list(keys.group)).is_first_distinct()
        if len(keys.group) > 1
        else pl.col(keys.group[0]).is_first_distinct()
    )
    rest = [g for g in keys.group if g not in by]
    return prepared.lazy().filter(first).select(*by, *rest, *columns).collect()


def _sizes_and_stds(profiles: pl.DataFrame, ddof: int) -> pl.DataFrame:
    """``size`` and ``std`` (of the valid rewards, with ``ddof``; null below ddof + 1 of
    them) of every group, from one row per group with its profile (variance with ddof 1):
    ``var_d = var_1 (n - 1) / (n - d)``, and 0 for one reward with ddof 0."""
    n = pl.col(VALID_KEY)
    var1 = pl.col(metrics.GROUP_VAR)
    var = var1 if ddof == 1 else pl.when(n == 1).then(0.0).otherwise(var1 * (n - 1) / (n - ddof))
    return profiles.select(
        pl.col(SIZE_KEY).alias("size"), pl.when(n > ddof).then(var.sqrt()).alias("std")
    )


def _group_rows(
    prepared: pl.DataFrame,
    plan: Plan,
    by: tuple[str, ...],
    adv: str | None,
    order: str | None = None,
) -> pl.DataFrame:
    """The group table, with each group's batch values (first seen), mean advantage and
    first ``order`` value (last, if given)."""
    exact = list(plan.keys.exact)
    batch = [c for c in by if c not in exact]
    extra = [pl.col(c).first() for c in [*batch, *([order] if order else [])]]
    if adv is not None:
        extra.append(pl.col(adv).cast(pl.Float64).mean().alias("advantage_mean"))
    table = group_table(prepared.lazy(), plan, extra)
    shown = [DISPLAY_NAMES.get(k, k) for k in exact]
    rest = [c for c in table.columns if c not in shown and c not in batch and c != order]
    return table.select(*shown, *batch, *rest, *([order] if order else []))


def _partials(
    prepared: pl.DataFrame,
    keys: Keys,
    by: tuple[str, ...],
    binary: bool,
    adv: str | None,
    deterministic: bool,
) -> tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame]:
    """The partials per value of ``by`` (one row without ``by``), with ``by`` the partials
    counted once per group (the overall row's: a group counts in every value of ``by``
    where it has rows and once overall), and one row per group with its profile."""
    group = [g for g in keys.group if g not in by]
    per_group = _one_row_per_group(prepared, keys, by, list(PROFILE_COLUMNS))
    if per_group is None:
        per_group = (
            prepared.lazy().group_by([*by, *group]).agg(pl.col(*PROFILE_COLUMNS).first()).collect()
        )
    advantage = pl.col(adv) if adv is not None else None
    per_by = metrics.partials(
        prepared.lazy(),
        by,
        groups=per_group.lazy(),
        advantage=advantage,
        pass_rates=binary,
        deterministic=deterministic,
    )
    if not by:
        return per_by, None, per_group
    one_per_group = per_group.unique(subset=list(keys.group), keep="first")
    return per_by, metrics.group_partials(one_per_group, pass_rates=binary), one_per_group


def _table(merged: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    """The figures of merged partials, in the tables' order."""
    finished = metrics.finish(merged, by)
    return finished.select(*by, *(c for c in TABLE_COLUMNS if c in finished.columns))


def largest_per_group(
    rows: pl.DataFrame, keys: Sequence[str], over: pl.Expr, top: int, *extra: pl.Expr
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per group of ``keys`` (in order of appearance): ``extra``, ``size``, the largest
    ``abs_diff`` as ``max_abs_diff`` and ``over``: whether a row is ``over`` (a row
    predicate); and the ``top`` groups over, largest first (ties in order of appearance),
    without that flag. ``verify`` and ``compare``."""
    groups = rows.group_by(list(keys), maintain_order=True).agg(
        *extra, size=pl.len(), max_abs_diff=pl.col("abs_diff").max(), over=over.any()
    )
    worst = groups.filter("over").drop("over")
    return groups, worst.sort("max_abs_diff", descending=True, maintain_order=True).head(top)


def histogram(values: pl.Series, bins: int = 20) -> tuple[list[float], list[int]]:
    """Equal-width histogram of the finite ``values``: ``bins + 1`` edges and ``bins``
    counts, as numpy's (a value in bin ``floor((v - lo) / width)``, the largest in the last;
    one bin around the value when all are equal; nothing for no values), in one Polars pass."""
    v = pl.col(values.name).cast(pl.Float64)
    data = values.to_frame().lazy().filter(v.is_finite())
    lo, hi = data.select(v.min(), v.max().alias("hi")).collect().row(0)
    if lo is None:
        return [], []
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    edges = [lo + width * i for i in range(bins)] + [hi]
    index = ((v - lo) / width).floor().cast(pl.Int64).clip(0, bins - 1).alias("bin")
    counts = [0] * bins
    for i, n in data.select(index).group_by("bin").len().collect().iter_rows():
        counts[i] = n
    return edges, counts

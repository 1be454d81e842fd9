"""``verify``: recompute advantages and compare them with the ones a trainer logged.

Agreement is per row, relative past 1: ``|stored - recomputed| <= tol * max(1,
|recomputed|)``; two nulls (or NaNs) agree, a null against a number does not. A group that
float32 cannot compute within ``tol`` (:func:`beyond_float32`) is set aside with a
warning, its rows not counted. A list-valued advantage is compared element by element under
process supervision; under an estimator with one advantage per response (verl's advantage
tensor, one value per token) it is read as one value per response
(:func:`grpo_cli.core.layouts.per_response`).

When rows differ the report carries hints (:func:`_hints`, :func:`_matching_route`).
``preset="auto"`` tries every preset the log has the inputs of and names those that match
(:func:`_verify_auto`).

A Parquet log over PIECE_ROWS rows is verified in pieces of whole groups, only the columns
the recomputation reads (:func:`_verify_pieces`; ``auto``: the presets compared on the
first piece, the whole log checked with the closest), unless a piece cannot stand for its
groups or batch (a dump layout, a batch that is the whole log): then it is read whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import polars as pl

from grpo_cli.core.columns import RECOMPUTED_KEY as RECOMPUTED
from grpo_cli.core.columns import REWARD_KEY as REWARD  # the one reward the estimator sees
from grpo_cli.core.columns import ROW_KEY as ROW  # the input row number, shown as ``row``
from grpo_cli.core.columns import logged_advantage, not_a_reward
from grpo_cli.core.errors import (
    GrpoAdvError,
    InputError,
    Message,
    OptionsError,
    Verbatim,
    join,
    option,
)
from grpo_cli.core.expressions import collect
from grpo_cli.core.layouts import (
    TRL_PROMPT,
    detect_layout,
    once_per_generation,
    per_response,
    prompt_runs,
    runs_group_size,
)
from grpo_cli.core.options import DEFAULT_GROUP_COLS, AdvantageOptions, not_rewards_hint
from grpo_cli.core.plan import Plan
from grpo_cli.core.presets import FLOAT32_TOL, PRESET_FIELDS, PRESETS, get_preset
from grpo_cli.core.resolve import derive, make_request, resolve
from grpo_cli.core.run_summary import DISPLAY_NAMES, check_batch_spans, span_warnings
from grpo_cli.jobs.compute import annotate_frame, refuse_file_engines
from grpo_cli.report.explain import cut
from grpo_cli.report.summarize import largest_per_group


@dataclass(frozen=True)
class VerifyReport:
    """How a logged advantage column compares with the recomputed one.

    Attributes:
        rows: rows compared (list elements for list columns).
        max_abs_diff: the largest absolute difference (inf where a null meets a number).
        rows_over, groups_over: rows whose difference exceeds ``tol`` (relative past 1;
            groups beyond float32 set aside), groups holding one.
        worst: the ``top`` groups by largest difference: keys, ``prompt`` (a TRL dump's
            positional groups: its start, :func:`grpo_cli.report.explain.cut`), size,
            max_abs_diff.
        options, layout: the options recomputed with, the dump layout read as (or None).
        preset: the preset recomputed with (under ``auto``: the one the report is of).
        found: ``auto``'s line: the presets that match, or the closest and by how much.
        differing: the rows over tolerance: input ``row`` (from 0), the group key,
            ``prompt`` (if logged), ``logged``, ``recomputed``, ``difference`` (logged -
            recomputed; null where one side is null).
    """

    rows: int
    groups: int
    max_abs_diff: float
    rows_over: int
    groups_over: int
    worst: pl.DataFrame
    tol: float
    options: AdvantageOptions
    layout: str | None
    differing: pl.DataFrame
    warnings: tuple[Message, ...] = ()
    hints: tuple[Message, ...] = ()
    preset: str | None = None
    found: Message | None = None

    @property
    def agree(self) -> bool:
        return self.rows_over == 0


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`run_verify` did: the ``report``, the log's ``source`` (``3 files``,
    ``standard input``...) and where the rows over tolerance went (or None)."""

    report: VerifyReport
    source: str
    diff_written: str | None = None


def run_verify(
    inputs: Sequence[str | Path],
    *,
    preset: str | None = None,
    options: Mapping[str, Any] | None = None,
    advantage_col: str | None = None,
    tol: float = FLOAT32_TOL,
    top: int = 5,
    input_format: str | None = None,
    diff_out: str | Path | None = None,
    force: bool = False,
    warnings: bool = True,
    warn: Callable[[str], None] | None = None,
) -> VerifyResult:
    """Verify the logged advantages of the log in ``inputs`` (what ``grpo-adv verify``
    runs) with :func:`verify_advantages`.

    Args:
        inputs, preset, options, input_format, force, warn: as for
            :func:`grpo_cli.report.summarize.run_summarize` (an engine that reads files
            itself, ``backend="partitioned"`` or ``"ray"``, refused before any read). No
            preset and no option a preset sets (``estimator``, ``eps``...: only the log's
            columns, weights...): ``"auto"``, every preset.
        advantage_col, tol, top: as for :func:`verify_advantages`; ``warnings`` is its ``warn``.
        diff_out: where the differing rows go (``"-"``: standard output; its format checked
            before any read), or None.
    """
    from grpo_cli.io.formats import table_format
    from grpo_cli.io.write import write_table
    from grpo_cli.jobs.outputs import (
        input_paths,
        normalized_format,
        read_input,
        remove_leftovers,
        sources_or_stdin,
    )
    from grpo_cli.report.pieces import big_log

    sources = sources_or_stdin([str(source) for source in inputs])
    diff_path = None if diff_out is None else Path(diff_out)
    if diff_path is not None:
        table_format(diff_path, flag=None)  # verify has no format option
    explicit = dict(options or {})
    refuse_file_engines(explicit.get("backend"), "verify")
    key_cols = tuple(explicit.get("group_cols", DEFAULT_GROUP_COLS))
    paths = input_paths(sources)
    if preset is None and not PRESET_FIELDS & explicit.keys():
        preset = AUTO  # nothing asks for a method: name the trainer

    def verify(
        frame: pl.DataFrame,
        search: bool = True,
        preset: str | None = preset,
        presets: Sequence[str] | None = None,
    ) -> VerifyReport:
        return verify_advantages(
            frame,
            preset,
            presets=presets,
            advantage_col=advantage_col,
            tol=tol,
            top=top,
            warn=warnings,
            search=search,
            **explicit,
        )

    big = big_log(paths, normalized_format(input_format))
    report = (
        None if big is None else _verify_pieces(*big, preset, explicit, advantage_col, top, verify)
    )
    if report is not None:
        source = str(paths[0])
    else:
        log = read_input(paths, input_format, key_cols)
        report = verify(log.frame)
        report, source = replace(report, warnings=(*log.warnings, *report.warnings)), log.source
    if diff_path is None:
        return VerifyResult(report, source)
    to_stdout = str(diff_path) == "-"
    if not to_stdout:
        remove_leftovers([diff_path], warn)
    write_table(report.differing, diff_path, force=force, protected=paths)
    return VerifyResult(report, source, "standard output" if to_stdout else str(diff_path))


def _verify_pieces(
    path: Path,
    rows: int,
    preset: str | None,
    explicit: dict[str, Any],
    advantage_col: str | None,
    top: int,
    verify: Callable[[pl.DataFrame, bool, str | None, Sequence[str] | None], VerifyReport],
) -> VerifyReport | None:
    """The report of the big Parquet log ``path`` (``rows`` rows) in bounded memory: only
    the columns the recomputation reads, in pieces of whole groups
    (:mod:`grpo_cli.report.pieces`), each verified in memory by ``verify``
    (:func:`verify_advantages` with the command's options, given a piece, whether to search
    for a route, the preset and under ``auto`` the presets to try), the reports merged
    (:func:`_merged_reports`).

    A formula that reads batch statistics goes by pieces when its batch is a column of the
    log (``--batch-col step``): pieces are spread by it, each batch whole in one piece
    (memory then set by the largest batch). ``auto`` compares the presets on the first
    piece (whole steps where groups lie within steps, else whole groups), then verifies the
    whole log with the closest (:func:`_auto_pieces`). None where a piece cannot stand for
    its groups or its batch: a dump layout or a derived key, a batch that is the whole log
    (no ``--batch-col``), a list-valued or missing advantage column: read whole."""
    from grpo_cli.engines.batch_partials import needs_batch_stats
    from grpo_cli.io.read import scan_file
    from grpo_cli.report.pieces import ROW, read_pieces

    schema = scan_file(path).collect_schema()
    column = logged_advantage(schema.names(), advantage_col)
    if column not in schema or isinstance(schema[column], pl.List):
        return None
    inputs = pl.Schema({k: v for k, v in schema.items() if k != column})
    if preset == AUTO:
        if _log_layout(pl.DataFrame(schema=schema)) is not None:
            return None
        return _auto_pieces(path, rows, schema, column, explicit, top, verify)
    request = make_request(preset, {**explicit, "advantage_col": RECOMPUTED})
    plan = resolve(request, inputs)
    if plan.layout is not None or plan.derived:
        return None
    batch = plan.keys.batch if needs_batch_stats(plan) else ()
    if not set(batch) <= set(plan.keys.exact):  # the whole log (or a column across groups)
        return None
    columns = _piece_columns([plan], schema, column)
    reports: list[VerifyReport] = []
    spread, split = (batch, False) if batch else (None, True)
    for piece in read_pieces(path, rows, columns, plan.keys.exact, spread, split=split):
        report = verify(piece.drop(ROW), not any(r.hints for r in reports), preset, None)
        reports.append(_at_input_rows(report, piece))
    return _merged_reports(reports, top)


def _auto_pieces(
    path: Path,
    rows: int,
    schema: pl.Schema,
    column: str,
    explicit: dict[str, Any],
    top: int,
    verify: Callable[[pl.DataFrame, bool, str | None, Sequence[str] | None], VerifyReport],
) -> VerifyReport | None:
    """``auto`` on a big log: every preset whose inputs the log has is compared on the first
    piece (a sample of whole steps where every preset groups within steps, else of whole
    groups), and the whole log is verified, piece by piece, with the closest. Presets whose
    batch is the whole log (none named with ``--batch-col``) are not tried: a piece cannot
    stand for it (``found`` counts them when none matches). None when the presets group by
    different keys or derive them, or read a batch column other than the step."""
    from grpo_cli.engines.batch_partials import needs_batch_stats
    from grpo_cli.report.pieces import ROW, read_pieces

    inputs = pl.Schema({k: v for k, v in schema.items() if k != column})
    plans: dict[str, Plan] = {}
    for name in PRESETS:
        try:
            request = make_request(name, {**explicit, "advantage_col": RECOMPUTED})
            plans[name] = resolve(request, inputs)
        except GrpoAdvError:
            continue  # the log lacks its inputs: _verify_auto leaves it out too
    keys = {plan.keys.exact for plan in plans.values()}
    if len(keys) != 1 or any(plan.derived for plan in plans.values()):
        return None
    (key,) = keys
    whole_log = [n for n, p in plans.items() if needs_batch_stats(p) and not _batch_in(p, schema)]
    tried = [name for name in plans if name not in whole_log]
    if not tried:
        return None
    steps = {plan.step_col for plan in plans.values()}
    step = steps.pop() if len(steps) == 1 else None
    spread = (step,) if step is not None and step in key else None
    batches = {c for n in tried if needs_batch_stats(plans[n]) for c in plans[n].keys.batch}
    if batches and not batches <= set(spread or ()):
        return None  # a batch column other than the step: read whole
    columns = _piece_columns([plans[n] for n in tried], schema, column)
    reports: list[VerifyReport] = []
    found: Message | None = None
    chosen: str | None = None
    sample = 0
    for piece in read_pieces(path, rows, columns, key, spread, split=not batches):
        if chosen is None:
            report = verify(piece.drop(ROW), False, AUTO, tried)
            chosen, found, sample = report.preset, report.found, piece.height
        else:
            report = verify(piece.drop(ROW), False, chosen, None)
        reports.append(_at_input_rows(report, piece))
    merged = _merged_reports(reports, top)
    unit = "whole steps" if spread else "whole groups"
    left_out = (
        f"; not tried: {len(whole_log)} preset(s) whose batch is the whole log, which a "
        "sample cannot stand for (name one with "
        + option("preset")
        + ", and "
        + option("batch_col")
        + " if its batch is the step)"
        if whole_log
        else ""
    )
    if merged.agree and reports[0].agree and found is not None:
        found = join(
            "",
            [
                found,
                f" (presets compared on a sample of {sample:,} rows, {unit}; the whole log "
                "checked with ",
                option("preset", Verbatim(str(chosen))),
                ")",
            ],
        )
    else:
        share = 100 * merged.rows_over / max(merged.rows, 1)
        found = join(
            "",
            [
                "no preset reproduces the logged advantages; the closest on a sample of "
                f"{sample:,} rows ({unit}) is ",
                option("preset", Verbatim(str(chosen))),
                f": on the whole log, max |difference| {merged.max_abs_diff:.3g}, "
                f"{merged.rows_over:,} of {merged.rows:,} rows ({share:.0f}%) over tolerance",
                left_out,
            ],
        )
    return replace(merged, found=found)


def _batch_in(plan: Plan, schema: pl.Schema) -> bool:
    """Whether the plan's batch is columns of the log within its group key (not the whole
    log): each batch is then whole in a piece spread by them."""
    return all(c in schema and c in plan.keys.exact for c in plan.keys.batch)


def _piece_columns(plans: Sequence[Plan], schema: pl.Schema, column: str) -> list[str]:
    """The columns the pieces carry: what ``plans`` recompute with and check (keys, inputs,
    batch, step, response id) and the logged ``column``."""
    from grpo_cli.core.plan import step_column
    from grpo_cli.core.run_summary import response_id
    from grpo_cli.engines.narrow import needed_columns

    names = schema.names()
    wanted: list[str | None] = []
    for plan in plans:
        wanted += [*plan.keys.exact, *plan.keys.batch, *needed_columns(plan.options)]
        wanted += [step_column(plan), response_id(names, plan.options)]
    return [c for c in dict.fromkeys([*wanted, column]) if c is not None and c in schema]


def _at_input_rows(report: VerifyReport, piece: pl.DataFrame) -> VerifyReport:
    """``report`` of ``piece`` with its differing rows numbered as in the input (ROW)."""
    from grpo_cli.report.pieces import ROW

    rows_at = piece[ROW].gather(report.differing["row"])
    return replace(report, differing=report.differing.with_columns(row=rows_at))


def _merged_reports(reports: Sequence[VerifyReport], top: int) -> VerifyReport:
    """The report of a log from those of its pieces (every group whole in one): counts
    added, the largest difference, the ``top`` worst groups of all, the differing rows in
    input order; the first piece's hints that has any, every distinct warning."""
    first = reports[0]
    if len(reports) == 1:
        return first
    worst = pl.concat([r.worst for r in reports], how="diagonal_relaxed")
    differing = pl.concat([r.differing for r in reports], how="diagonal_relaxed")
    return replace(
        first,
        rows=sum(r.rows for r in reports),
        groups=sum(r.groups for r in reports),
        max_abs_diff=max(r.max_abs_diff for r in reports),
        rows_over=sum(r.rows_over for r in reports),
        groups_over=sum(r.groups_over for r in reports),
        worst=worst.sort("max_abs_diff", descending=True, maintain_order=True).head(top),
        differing=differing.sort("row"),
        warnings=tuple(dict.fromkeys(w for r in reports for w in r.warnings)),
        hints=next((r.hints for r in reports if r.hints), ()),
    )


def _no_logged_advantages(
    frame: pl.DataFrame, preset: str | None, explicit: dict[str, Any], advantage_col: str
) -> None:
    """Refuse a log without ``advantage_col``, suggesting only a float column (or a list
    of floats) that is not an input of the computation (never the reward: a verl dump's
    ``score``), else saying there is nothing to verify."""
    options = resolve(make_request(preset, explicit), frame.head(0), checks=False).options
    inputs = (options.batch_col, options.length_col, options.baseline_col)
    used = {*options.reward_cols, *options.group_cols, *inputs}
    candidates = [
        name
        for name, dtype in frame.schema.items()
        if name not in used
        and (dtype.is_float() or (isinstance(dtype, pl.List) and dtype.inner.is_float()))
    ]
    hint: Message = (
        "name the logged advantage column with "
        + option("advantage_col")
        + ", e.g. "
        + option("advantage_col", candidates[0])
        if candidates
        else "this log holds no advantages to check: grpo-adv compute writes them"
    )
    raise InputError(
        f"advantage column {advantage_col!r} not found; the input has columns: "
        + ", ".join(frame.columns[:20]),
        hint=hint,
    )


AUTO: Final = "auto"  # --preset auto: every preset whose inputs the log has
FLOAT32_EPS: Final = 2.0**-23  # float32's machine epsilon: its spacing at 1
SEARCH_ROW_BUDGET: Final = 20_000_000  # rows recomputed at most while looking for a route
SEARCH_SUBSETS: Final = 4  # reward columns at most whose subsets are tried


def verify_advantages(
    frame: pl.DataFrame,
    preset: str | None = None,
    *,
    advantage_col: str | None = None,
    tol: float = FLOAT32_TOL,
    top: int = 5,
    warn: bool = True,
    search: bool = True,
    layout: str | None = None,
    presets: Sequence[str] | None = None,
    **explicit: Any,
) -> VerifyReport:
    """Recompute with ``preset`` and ``explicit`` options; compare with ``advantage_col``
    (None: ``advantage``, else verl's ``advantages``). Groups that span the batch column
    are refused; ``warn``: the warnings (span checks: one more grouping); ``search``: when
    rows differ, the hint names the options that reproduce the log (:func:`_matching_route`).
    ``preset="auto"``: every preset (or those of ``presets``), see :func:`_verify_auto`.
    ``layout``: the dump layout to read the log in, when not the preset's."""
    if not tol >= 0:
        raise OptionsError(
            option("tol") + f" must be >= 0, got {tol}",
            hint="e.g. " + option("tol", Verbatim("1e-5")),
            value=tol,
        )
    advantage_col = logged_advantage(frame.columns, advantage_col)  # verl's "advantages" too
    if advantage_col not in frame.columns:
        _no_logged_advantages(frame, None if preset == AUTO else preset, explicit, advantage_col)
    stored_type = frame.schema[advantage_col]
    is_list = isinstance(stored_type, pl.List)
    inner = stored_type.inner if isinstance(stored_type, pl.List) else stored_type
    if not inner.is_numeric():
        raise InputError(
            f"advantage column {advantage_col!r} holds {stored_type} values, not numbers",
            hint="name the logged advantage column with " + option("advantage_col"),
            column=advantage_col,
        )
    if preset == AUTO:
        return _verify_auto(frame, advantage_col, tol, top, warn, explicit, presets)
    frame, repeated = once_per_generation(
        frame, layout or (get_preset(preset).layout if preset else None)
    )
    request = make_request(preset, {**explicit, "advantage_col": RECOMPUTED})
    logged, tokens = frame.select(advantage_col), None
    if request.estimator.unit == "response":  # one advantage per response, not per step
        logged, tokens = per_response(logged, advantage_col)
        is_list = False
    source = frame.drop(advantage_col)  # a dump layout picks its rewards without it
    plan = resolve(request, source, layout=layout)
    laid = derive(source, plan)
    full, plan = annotate_frame(laid.with_columns(logged), plan)
    keys = plan.keys
    check_batch_spans(full, plan)
    warnings: tuple[Message, ...] = ()
    if warn:
        once = [note for note in (repeated, tokens) if note]
        warnings = (*plan.notes, *once, *span_warnings(full, plan))
    shown_prompt = (
        [TRL_PROMPT] if TRL_PROMPT in full.columns and TRL_PROMPT not in keys.exact else []
    )
    reward = [REWARD] if REWARD in full.columns and keys.exact and not is_list else []
    pairs = (
        full.lazy()
        .with_row_index(ROW)
        .select(ROW, *keys.exact, *shown_prompt, pl.col(advantage_col), pl.col(RECOMPUTED), *reward)
    )
    if is_list:
        pairs = pairs.explode(advantage_col, RECOMPUTED)
    stored = pl.col(advantage_col).cast(pl.Float64).fill_nan(None)
    new = pl.col(RECOMPUTED)
    one_null = pl.when(stored.is_null() & new.is_null()).then(0.0).otherwise(float("inf"))
    diff = (stored - new).abs().fill_null(one_null).alias("abs_diff")  # two nulls agree
    over_tol = pl.col("abs_diff") > tol * pl.max_horizontal(1.0, new.abs())
    rows = collect(pairs.with_columns(diff).with_columns(over=over_tol, aside=False))
    if reward and rows["over"].any():  # those in a group beyond float32 are set aside
        beyond = beyond_float32(REWARD, RECOMPUTED, tol).over(keys.exact)
        rows = rows.with_columns(over=pl.col("over") & ~beyond, aside=pl.col("over") & beyond)
    prompts = (pl.col(c).first() for c in shown_prompt)
    per_group, worst = largest_per_group(rows, keys.exact, pl.col("over"), top, *prompts)
    worst = worst.with_columns(  # a positional group's name: its prompt, shortened
        pl.Series(c, [cut(text) for text in worst[c]], dtype=pl.String) for c in shown_prompt
    ).rename({k: DISPLAY_NAMES[k] for k in keys.exact if k in DISPLAY_NAMES})
    set_aside = rows.filter("aside")
    if warn and set_aside.height:
        warnings = (*warnings, _beyond_warning(rows, set_aside, keys.exact, tol))
    max_diff = rows.filter(~pl.col("aside"))["abs_diff"].max()
    over = rows.filter("over")
    differing = over.select(
        pl.col(ROW).alias("row"),
        *(pl.col(k).alias(DISPLAY_NAMES.get(k, k)) for k in keys.exact),
        *shown_prompt,
        pl.col(advantage_col).cast(pl.Float64).alias("logged"),
        pl.col(RECOMPUTED).alias("recomputed"),
        (pl.col(advantage_col).cast(pl.Float64) - pl.col(RECOMPUTED)).alias("difference"),
    )
    hints = _hints(laid, plan.options, over.height, rows.height)
    if over.height and search:
        route = _matching_route(frame, preset, explicit, plan.options, advantage_col, tol)
        if route is not None:
            hints = (route,)
    return VerifyReport(
        rows=rows.height,
        groups=per_group.height,
        max_abs_diff=float(max_diff) if max_diff is not None else 0.0,  # type: ignore[arg-type]
        rows_over=over.height,
        groups_over=int(per_group["over"].sum()),
        worst=worst,
        tol=tol,
        options=plan.options,
        layout=plan.layout,
        warnings=warnings,
        hints=hints,
        differing=differing,
        preset=preset,
    )


def beyond_float32(reward: str, advantage: str, tol: float) -> pl.Expr:
    """Whether a row's group is beyond float32: float32's rounding of its rewards alone can
    move its advantages by more than ``tol`` (relative past 1), so a float32 trainer's
    numbers there are rounding noise, not its formula.

    A float32 trainer holds each reward and the group's mean in float32; each rounding
    moves a value ``x`` by up to ``2^-24 |x|``, so a centred reward ``r - mean_g`` is off
    by up to ``e_g = 2^-23 max|r_g|``. The estimator turns centred rewards into advantages
    with a gain ``S_g = max|A_g| / max|r_g - mean_g|`` (read off the recomputed values:
    grpo ``1 / (std_g + eps)``, dr_grpo 1, rloo ``n / (n - 1)``, maxrl
    ``1 / (mean_g + eps)``, a batch whitening ``1 / std_b``). The group is beyond float32
    when ``e_g * S_g > max(tol, FLOAT32_TOL) * max(1, max|A_g|)``: rewards near 1e6 with a
    spread near 1 (``e_g`` 0.12, ``S_g`` about 1), a spread near 1e-7 under eps 1e-6
    (``S_g`` near 1e6). A ``tol`` below FLOAT32_TOL asks for more than float32 ever gives:
    the criterion keeps FLOAT32_TOL, so that a strict ``tol`` still shows float32's ordinary
    rounding (0/1 rewards: ``e_g * S_g`` about 2e-7) as differences.
    A trainer's one-pass ``E[x^2] - E[x]^2`` (NeMo-RL) loses ``2^-23 max|r_g|^2`` of
    variance and cancels entirely in the same groups first. A group whose rewards are all
    equal (or one) is never beyond: its centred rewards are 0 in float32 too whenever its
    mean is exact (0/1 rewards), so its difference is a policy's (singleton, zero variance).
    An aggregation over one group's rows (``group_by(key).agg`` or ``.over(key)``) of the
    columns ``reward`` (the estimator's reward) and ``advantage`` (the recomputed one).
    """
    r, a = pl.col(reward), pl.col(advantage)
    mean, largest = r.mean(), a.abs().max()
    spread = pl.max_horizontal(r.max() - mean, mean - r.min())  # max |r - mean_g|
    error = FLOAT32_EPS * r.abs().max() * largest / spread
    allowed = max(tol, FLOAT32_TOL) * pl.max_horizontal(1.0, largest)
    return ((spread > 0) & (error > allowed)).fill_null(False).alias("beyond_float32")


def _beyond_warning(
    rows: pl.DataFrame, set_aside: pl.DataFrame, keys: Sequence[str], tol: float
) -> Message:
    """The one warning line of the rows :func:`beyond_float32` set aside: how many, the
    largest reward of their groups, float32's resolution there and their largest
    difference."""
    groups = set_aside.select(keys).unique()
    largest, worst = (
        rows.join(groups, on=list(keys))
        .select(
            pl.col(REWARD).abs().max().cast(pl.Float64),
            pl.col("abs_diff").filter("aside").max(),
        )
        .row(0)
    )
    return (
        f"{groups.height:,} group(s) beyond float32, their {set_aside.height:,} row(s) over "
        f"tolerance not counted: rewards up to {largest:.3g} leave float32 a resolution of "
        f"2^-23 x {largest:.3g} = {FLOAT32_EPS * largest:.2g}, which the formula's gain "
        "makes more than "
        + option("tol", Verbatim(f"{max(tol, FLOAT32_TOL):g}"))
        + f" (their largest difference: {worst:.3g})"
    )


def _verify_auto(
    frame: pl.DataFrame,
    advantage_col: str,
    tol: float,
    top: int,
    warn: bool,
    explicit: dict[str, Any],
    presets: Sequence[str] | None = None,
) -> VerifyReport:
    """``preset="auto"``: every preset (in table order; only ``presets`` if given) whose
    inputs the log has, each recomputed once on ``frame`` read in the log's own dump layout
    (:func:`_log_layout`).
    The report is the closest preset's (fewest rows over tolerance, then the smallest
    largest difference; then table order): when it agrees, its ``found`` names every
    preset that matches, closest first; else it says by how much the closest differs. A
    log no preset applies to raises the first preset's error, and so does a log no preset
    reproduces when a preset refused it as input (exit 3: e.g. groups spanning the batch
    column the user named, which the presets without groups do not check). Only the
    closest report is kept whole as the presets go (each other's differing rows, up to every
    row of the log, would add up: 1.4 GB for 1M rows)."""
    layout = _log_layout(frame)
    tried: list[tuple[int, float, str]] = []  # rows over tolerance, largest difference, name
    closest: VerifyReport | None = None
    first_error: GrpoAdvError | None = None
    for name in PRESETS if presets is None else presets:
        try:
            report = _candidate(
                frame,
                name,
                layout,
                advantage_col=advantage_col,
                tol=tol,
                top=top,
                warn=warn,
                **explicit,
            )
        except GrpoAdvError as error:
            first_error = first_error or error
            continue
        if report is None:
            continue
        tried.append((report.rows_over, report.max_abs_diff, name))
        if closest is None or tried[-1][:2] < (closest.rows_over, closest.max_abs_diff):
            closest = report  # the first of equals stays: table order
    if closest is None:
        assert first_error is not None  # PRESETS is not empty
        raise first_error
    tried.sort(key=lambda scores: scores[:2])  # stable: table order among equals
    name = tried[0][2]
    if not closest.agree and isinstance(first_error, InputError):
        raise first_error
    if closest.agree:
        matches = [name for over, _, name in tried if over == 0]
        columns = closest.options.reward_cols
        return replace(closest, found=_route_hint(matches, None, columns, columns, {}))
    share = 100 * closest.rows_over / max(closest.rows, 1)
    found = (
        "no preset reproduces the logged advantages; the closest is "
        + option("preset", Verbatim(name))
        + f": max |difference| {closest.max_abs_diff:.3g}, {closest.rows_over:,} of "
        f"{closest.rows:,} rows ({share:.0f}%) over tolerance"
    )
    return replace(closest, found=found)


def _log_layout(frame: pl.DataFrame, first: str | None = None) -> str | None:
    """The trainer dump layout ``frame`` is in: ``first``'s when it fits, else the first
    preset layout (in table order) that fits; None when none does."""
    layouts = dict.fromkeys(p.layout for p in PRESETS.values() if p.layout is not None)
    return next(
        (lay for lay in (first, *layouts) if lay and detect_layout(frame.columns, lay)), None
    )


def _candidate(
    frame: pl.DataFrame, name: str | None, layout: str | None, **given: Any
) -> VerifyReport | None:
    """``name``'s report on ``frame`` read in ``layout`` (no search for routes), or None
    when the preset sums normalised rewards (GDPO) and the log has one reward column.
    Raises what the preset raises on this log (a missing length column...)."""
    report = verify_advantages(frame, name, layout=layout, search=False, **given)
    per_reward = report.options.aggregation == "normalize_then_sum"
    return None if per_reward and len(report.options.reward_cols) < 2 else report


def _matching_route(
    frame: pl.DataFrame,
    preset: str | None,
    explicit: dict[str, Any],
    options: AdvantageOptions,
    advantage_col: str,
    tol: float,
) -> Message | None:
    """The options that reproduce the logged column when the given ones do not: the
    presets that match (the trainer's own first: ``trl`` on a ``scale_rewards="batch"``
    run: ``trl-batch``; then every other, in table order), with the given reward columns
    or else a subset of them (unless named; at most SEARCH_SUBSETS columns, largest subsets
    first); None when none agrees within SEARCH_ROW_BUDGET recomputed rows. Without a
    preset only subsets of the reward columns are tried."""
    from grpo_cli.core.presets import siblings

    family = siblings(preset) if preset else []
    others = [p for p in PRESETS if p != preset and p not in family]
    presets = [preset, *family, *others] if preset else [None]
    layout = _log_layout(frame, get_preset(preset).layout) if preset else None
    columns = options.reward_cols
    reward_sets: list[tuple[str, ...]] = [columns]
    if "reward_cols" not in explicit and 1 < len(columns) <= SEARCH_SUBSETS:
        for size in range(len(columns) - 1, 0, -1):
            reward_sets += list(itertools.combinations(columns, size))
    given = explicit.get("reward_weights")
    budget = SEARCH_ROW_BUDGET
    for rewards in reward_sets:
        tried = dict(explicit)
        if rewards != columns:
            tried["reward_cols"] = rewards
            if given is not None and len(given) == len(columns):
                tried["reward_weights"] = tuple(given[columns.index(c)] for c in rewards)
            else:
                tried.pop("reward_weights", None)
        matches: list[str | None] = []
        for candidate in presets:
            if (candidate, rewards) == (preset, columns):
                continue
            if budget < frame.height:
                return None
            budget -= frame.height
            try:
                report = _candidate(
                    frame,
                    candidate,
                    layout,
                    advantage_col=advantage_col,
                    tol=tol,
                    warn=False,
                    **tried,
                )
            except GrpoAdvError:
                continue
            if report is not None and report.agree:
                matches.append(candidate)
        if matches:
            return _route_hint(matches, preset, rewards, columns, tried)
    return None


def _route_hint(
    matches: Sequence[str | None],
    preset: str | None,
    rewards: tuple[str, ...],
    columns: tuple[str, ...],
    tried: dict[str, Any],
) -> Message:
    """The one line naming what :func:`_matching_route` or :func:`_verify_auto` found: the
    presets that match (several: ``identical on this log``; none named when only the given
    one does, with a subset of the reward columns)."""
    named = [] if list(matches) == [preset] else [str(m) for m in matches]
    presets = [option("preset", Verbatim(m)) for m in named]
    parts: list[Message] = [join(", ", presets)] if presets else []
    if rewards != columns:
        parts.append(option("reward_cols", rewards, short=True))
        if "reward_weights" in tried:
            weights = tuple(Verbatim(f"{w:g}") for w in tried["reward_weights"])
            parts.append(option("reward_weights", weights))
    left_out = [c for c in columns if c not in rewards]
    verb = "is not a reward" if len(left_out) == 1 else "are not rewards"
    why = f" ({', '.join(left_out)} {verb})" if left_out else ""
    same = ": identical on this log" if len(named) > 1 else ""
    return "the logged advantages match " + join(" ", parts) + why + same


def _hints(
    frame: pl.DataFrame, options: AdvantageOptions, rows_over: int, rows: int
) -> tuple[Message, ...]:
    """Why rows may differ: a ``--group-size`` that the runs of equal prompts contradict;
    else several reward columns summed when more than half the rows differ (as wrong
    weights give: a group where one reward varies agrees whatever the weights)."""
    if rows_over == 0:
        return ()
    if options.group_size is not None and TRL_PROMPT in frame.columns:
        batch = options.batch_col if options.batch_col in frame.columns else None
        runs_g = runs_group_size(prompt_runs(frame, batch))
        if runs_g is not None and runs_g != options.group_size:
            return (
                f"prompt runs have length {runs_g}, not "
                + option("group_size", options.group_size)
                + ": pass "
                + option("group_size", runs_g)
                + " (your num_generations), or leave it out to infer it",
            )
    columns = options.reward_cols
    if len(columns) < 2 or 2 * rows_over <= rows:
        return ()
    weights = ", ".join(f"{w:g}" for w in options.weights)
    fix = not_rewards_hint(columns)
    count = len(columns) - (0 if fix is None else sum(map(not_a_reward, columns)))
    return (
        f"{rows_over:,} of {rows:,} rows differ and {len(columns)} reward columns are "
        f"summed ({', '.join(columns)}; weights {weights})"
        + (": give" if fix is None else "; " + fix + " and")
        + " the trainer's weights with "
        + option("reward_weights", tuple(Verbatim(f"W{i + 1}") for i in range(count)))
        + " (TRL: GRPOConfig reward_weights)",
    )

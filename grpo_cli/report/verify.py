"""``verify``: recompute advantages and compare them with the ones a trainer logged.

Agreement is per row: ``|stored - recomputed| <= tol``; two nulls (or NaNs) agree, a null
against a number does not. A list-valued advantage is compared element by element under
process supervision; under an estimator with one advantage per response (verl's advantage
tensor, one value per token) it is read as one value per response
(:func:`grpo_cli.core.layouts.per_response`).

When rows differ the report carries hints (:func:`_hints`, :func:`_matching_route`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import polars as pl

from grpo_cli.core.columns import RECOMPUTED_KEY as RECOMPUTED
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
    once_per_generation,
    per_response,
    prompt_runs,
    runs_group_size,
)
from grpo_cli.core.options import DEFAULT_GROUP_COLS, AdvantageOptions, not_rewards_hint
from grpo_cli.core.presets import get_preset
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
        rows_over, groups_over: rows whose difference exceeds ``tol``, groups holding one.
        worst: the ``top`` groups by largest difference: keys, ``prompt`` (a TRL dump's
            positional groups: its start, :func:`grpo_cli.report.explain.cut`), size,
            max_abs_diff.
        options, layout: the options recomputed with, the dump layout read as (or None).
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
    tol: float = 1e-5,
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
            itself, ``backend="partitioned"`` or ``"ray"``, refused before any read).
        advantage_col, tol, top: as for :func:`verify_advantages`; ``warnings`` is its ``warn``.
        diff_out: where the differing rows go (``"-"``: standard output; its format checked
            before any read), or None.
    """
    from grpo_cli.io.formats import table_format
    from grpo_cli.io.write import write_table
    from grpo_cli.jobs.outputs import input_paths, read_input, remove_leftovers, sources_or_stdin

    sources = sources_or_stdin([str(source) for source in inputs])
    diff_path = None if diff_out is None else Path(diff_out)
    if diff_path is not None:
        table_format(diff_path, flag=None)  # verify has no format option
    explicit = dict(options or {})
    refuse_file_engines(explicit.get("backend"), "verify")
    key_cols = tuple(explicit.get("group_cols", DEFAULT_GROUP_COLS))
    paths = input_paths(sources)
    log = read_input(paths, input_format, key_cols)
    report = verify_advantages(
        log.frame, preset, advantage_col=advantage_col, tol=tol, top=top, warn=warnings, **explicit
    )
    report = replace(report, warnings=(*log.warnings, *report.warnings))
    if diff_path is None:
        return VerifyResult(report, log.source)
    to_stdout = str(diff_path) == "-"
    if not to_stdout:
        remove_leftovers([diff_path], warn)
    write_table(report.differing, diff_path, force=force, protected=paths)
    return VerifyResult(report, log.source, "standard output" if to_stdout else str(diff_path))


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


def verify_advantages(
    frame: pl.DataFrame,
    preset: str | None = None,
    *,
    advantage_col: str | None = None,
    tol: float = 1e-5,
    top: int = 5,
    warn: bool = True,
    search: bool = True,
    **explicit: Any,
) -> VerifyReport:
    """Recompute with ``preset`` and ``explicit`` options; compare with ``advantage_col``
    (None: ``advantage``, else verl's ``advantages``). Groups that span the batch column
    are refused; ``warn``: the warnings (span checks: one more grouping); ``search``: when
    rows differ, the hint names the options that reproduce the log (:func:`_matching_route`)."""
    if not tol >= 0:
        raise OptionsError(
            option("tol") + f" must be >= 0, got {tol}",
            hint="e.g. " + option("tol", Verbatim("1e-5")),
            value=tol,
        )
    advantage_col = logged_advantage(frame.columns, advantage_col)  # verl's "advantages" too
    if advantage_col not in frame.columns:
        _no_logged_advantages(frame, preset, explicit, advantage_col)
    stored_type = frame.schema[advantage_col]
    is_list = isinstance(stored_type, pl.List)
    inner = stored_type.inner if isinstance(stored_type, pl.List) else stored_type
    if not inner.is_numeric():
        raise InputError(
            f"advantage column {advantage_col!r} holds {stored_type} values, not numbers",
            hint="name the logged advantage column with " + option("advantage_col"),
            column=advantage_col,
        )
    frame, repeated = once_per_generation(frame, get_preset(preset).layout if preset else None)
    request = make_request(preset, {**explicit, "advantage_col": RECOMPUTED})
    logged, tokens = frame.select(advantage_col), None
    if request.estimator.unit == "response":  # one advantage per response, not per step
        logged, tokens = per_response(logged, advantage_col)
        is_list = False
    source = frame.drop(advantage_col)  # a dump layout picks its rewards without it
    plan = resolve(request, source)
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
    pairs = (
        full.lazy()
        .with_row_index(ROW)
        .select(ROW, *keys.exact, *shown_prompt, pl.col(advantage_col), pl.col(RECOMPUTED))
    )
    if is_list:
        pairs = pairs.explode(advantage_col, RECOMPUTED)
    stored = pl.col(advantage_col).cast(pl.Float64).fill_nan(None)
    new = pl.col(RECOMPUTED)
    one_null = pl.when(stored.is_null() & new.is_null()).then(0.0).otherwise(float("inf"))
    diff = (stored - new).abs().fill_null(one_null).alias("abs_diff")  # two nulls agree
    rows = collect(pairs.with_columns(diff))
    prompts = (pl.col(c).first() for c in shown_prompt)
    per_group, worst = largest_per_group(rows, keys.exact, tol, top, *prompts)
    worst = worst.with_columns(  # a positional group's name: its prompt, shortened
        pl.Series(c, [cut(text) for text in worst[c]], dtype=pl.String) for c in shown_prompt
    ).rename({k: DISPLAY_NAMES[k] for k in keys.exact if k in DISPLAY_NAMES})
    max_diff = rows["abs_diff"].max()
    over = rows.filter(pl.col("abs_diff") > tol)
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
        groups_over=int((per_group["max_abs_diff"] > tol).sum()),
        worst=worst,
        tol=tol,
        options=plan.options,
        layout=plan.layout,
        warnings=warnings,
        hints=hints,
        differing=differing,
    )


SEARCH_ROW_BUDGET: Final = 20_000_000  # rows recomputed at most while looking for a route
SEARCH_SUBSETS: Final = 4  # reward columns at most whose subsets are tried


def _matching_route(
    frame: pl.DataFrame,
    preset: str | None,
    explicit: dict[str, Any],
    options: AdvantageOptions,
    advantage_col: str,
    tol: float,
) -> Message | None:
    """The options that reproduce the logged column when the given ones do not: a sibling
    preset (``trl`` on a ``scale_rewards="batch"`` run: ``trl-batch``), a subset of the
    reward columns (unless named; at most SEARCH_SUBSETS columns, largest subsets first), or
    both; None when none agrees within SEARCH_ROW_BUDGET recomputed rows."""
    from grpo_cli.core.presets import siblings

    presets = [preset, *siblings(preset)] if preset else [None]
    columns = options.reward_cols
    reward_sets: list[tuple[str, ...]] = [columns]
    if "reward_cols" not in explicit and 1 < len(columns) <= SEARCH_SUBSETS:
        for size in range(len(columns) - 1, 0, -1):
            reward_sets += list(itertools.combinations(columns, size))
    given = explicit.get("reward_weights")
    budget = SEARCH_ROW_BUDGET
    for candidate in presets:
        for rewards in reward_sets:
            if (candidate, rewards) == (preset, columns):
                continue
            if budget < frame.height:
                return None
            budget -= frame.height
            tried = dict(explicit)
            if rewards != columns:
                tried["reward_cols"] = rewards
                if given is not None and len(given) == len(columns):
                    tried["reward_weights"] = tuple(given[columns.index(c)] for c in rewards)
                else:
                    tried.pop("reward_weights", None)
            try:
                report = verify_advantages(
                    frame,
                    candidate,
                    advantage_col=advantage_col,
                    tol=tol,
                    warn=False,
                    search=False,
                    **tried,
                )
            except GrpoAdvError:
                continue
            if report.agree:
                return _route_hint(candidate, preset, rewards, columns, tried)
    return None


def _route_hint(
    candidate: str | None,
    preset: str | None,
    rewards: tuple[str, ...],
    columns: tuple[str, ...],
    tried: dict[str, Any],
) -> Message:
    """The one-line hint naming what :func:`_matching_route` found."""
    parts: list[Message] = (
        [] if candidate == preset else [option("preset", Verbatim(str(candidate)))]
    )
    if rewards != columns:
        parts.append(option("reward_cols", rewards, short=True))
        if "reward_weights" in tried:
            weights = tuple(Verbatim(f"{w:g}") for w in tried["reward_weights"])
            parts.append(option("reward_weights", weights))
    left_out = [c for c in columns if c not in rewards]
    verb = "is not a reward" if len(left_out) == 1 else "are not rewards"
    why = f" ({', '.join(left_out)} {verb})" if left_out else ""
    return "the logged advantages match " + join(" ", parts) + why


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

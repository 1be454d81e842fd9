"""``explain``: one group's advantages with every number of the formula filled in, the way
the reference lessons teach it (no Rich here; :mod:`grpo_cli.cli.render` draws it). The
formula the engines run is evaluated by :mod:`grpo_cli.report.explain_context`; the
advantage shown is the one ``compute`` writes.

The group is chosen by exactly one of ``--group`` (its key, or the start of one group's key:
:func:`select_group`), ``--row N`` (the group of the input's row N, from 0, in the order
read) or ``--pick`` (:func:`pick_row`); see :func:`check_choice`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import polars as pl

from grpo_cli.core.columns import (
    LOGGED_KEY,
    POSITION_KEY,
    PREFIX,
    REWARD_KEY,
    ROW_KEY,
    STEP_COLUMNS,
    UID_GROUP,
)
from grpo_cli.core.engine_options import split_engine
from grpo_cli.core.errors import (
    InputError,
    Message,
    OptionsError,
    Verbatim,
    as_text,
    join,
    one_line,
    option,
)
from grpo_cli.core.estimators import Estimator
from grpo_cli.core.options import DEFAULT_GROUP_COLS, AdvantageOptions
from grpo_cli.core.policies import reads_batch
from grpo_cli.core.rewards import combined_reward, reward_expr, reward_parts
from grpo_cli.report.explain_context import FilledIn, fill_in, fmt, signed_sum

SHOWN_KEYS: Final = 8
# The names a user reads and types for the key columns the pipeline derives.
SHOWN_NAMES: Final = {POSITION_KEY: "group_index", UID_GROUP: "uid"}
# --pick: the groups explain can find for the user (see the module docstring).
PICKS: Final = ("worst", "zero-variance", "singleton")
CHOOSERS: Final = (option("group"), option("row"), option("pick"))
# At most this many candidates in the error of an ambiguous --group prefix.
SHOWN_CANDIDATES: Final = 5
# Shown beside each response when the log has them: the step, and the start of the
# response's text (the first of these columns the log has), cut to TEXT_WIDTH characters.
STEP_COL: Final = "step"
TEXT_COLS: Final = ("completion", "response", "output")
TEXT_WIDTH: Final = 40
# The ways to choose a group, as a message names them.
KEY_REF: Final = option("group", Verbatim("KEY"))
ROW_REF: Final = option("row", Verbatim("N"))
GROUP_OR_ROW: Final = KEY_REF + " or " + ROW_REF


@dataclass(frozen=True)
class ExplainedRow:
    """One response: its reward, the formula with numbers, the advantage ``compute`` gives,
    and the policy that decided it instead of the formula (if any)."""

    reward: float | None
    formula: str
    value: float | None  # the formula's value, recomputed here
    advantage: float | None  # the pipeline's
    policy: Message | None
    logged: float | None = None  # the input's own advantage column, if it had one
    row: int | None = None  # the response's row in the input, from 0
    step: Any = None  # its step (when the log has a step column)
    text: str | None = None  # the start of its text (when the log has one, see TEXT_COLS)
    parts: tuple[float | None, ...] = ()  # each summed reward column's value (reward_cols)


@dataclass(frozen=True)
class Explanation:
    """One group, explained (see the module docstring)."""

    key: dict[str, Any]
    options: AdvantageOptions
    estimator_summary: str
    formula: str
    size: int
    n: int
    mean: float | None
    var: float | None
    std: float | None
    steps: tuple[str, ...]
    rows: tuple[ExplainedRow, ...]
    notes: tuple[str, ...]
    logged: bool = False  # the input had an advantage column (shown beside ours)
    step_col: str | None = None  # the log's step column, shown per response
    text_col: str | None = None  # the log's text column, shown cut per response
    chosen: Message | None = None  # how the group was found, when not by its whole key
    warnings: tuple[Message, ...] = ()  # what reading the log inferred (a TRL group size)
    reward_cols: tuple[str, ...] = ()  # the reward columns summed into r, when several


def check_choice(
    group: str | Sequence[str] | None, row: int | None, pick: str | None
) -> tuple[str, ...]:
    """Check that exactly one way of choosing the group is given and that it can work
    (before any input is read); the ``--group`` values as a tuple (empty without)."""
    texts = (group,) if isinstance(group, str) else tuple(group or ())
    given = [
        flag
        for flag, value in zip(CHOOSERS, (texts, row, pick), strict=True)
        if value not in ((), None)
    ]
    example = "e.g. " + join(", ", [option("group", Verbatim("p007")), option("row", 0)])
    example += " or " + option("pick", "worst")
    if not given:
        choose = join(", ", [KEY_REF, ROW_REF]) + " or " + option("pick", Verbatim("WHICH"))
        raise OptionsError("explain needs a group: give " + choose, hint=example)
    if len(given) > 1:
        raise OptionsError(
            join(" and ", given)
            + " both choose the group: give only one of "
            + join(", ", CHOOSERS),
            hint=example,
        )
    if row is not None and row < 0:
        raise OptionsError(
            option("row", row) + " is not a row number: rows are numbered from 0",
            hint="give " + option("row", 0) + " for the first row of the log",
            value=row,
        )
    if pick is not None and pick not in PICKS:
        raise OptionsError(
            "unknown " + option("pick") + f" {pick!r}",
            hint=f"choose one of {', '.join(PICKS)}",
            value=pick,
        )
    return texts


def parse_key(
    text: str | Sequence[str], group_cols: tuple[str, ...], names: tuple[str, ...]
) -> tuple[str, ...]:
    """The ``--group`` value(s) as one value per group column; ``names``: the columns as the
    user knows them (derived ones differ, see SHOWN_NAMES).

    One ``--group`` of a composite key is split on commas (``1,p015``); repeated ones give
    one value each, so a value may hold commas (``--group step=1 --group "prompt=a, b"``).
    Each value is bare (the columns in order) or ``COL=VALUE`` (any order; COL a key
    column, so a value that starts with ``COL=`` is written ``COL=COL=...``); not both."""
    texts = (text,) if isinstance(text, str) else tuple(text)
    split = len(texts) == 1 and len(group_cols) > 1
    parts = tuple(p.strip() for p in texts[0].split(",")) if split else texts
    columns = {name: i for i, name in enumerate(names)}
    columns.update({c: i for i, c in enumerate(group_cols) if not c.startswith(PREFIX)})
    named: dict[int, str] = {}
    bare: list[str] = []
    for part in parts:
        column, equals, value = part.partition("=")
        if equals and column.strip() in columns:
            index = columns[column.strip()]
            if index in named:
                raise InputError(
                    option("group") + f" gives {names[index]} twice",
                    hint=_key_form(group_cols, names),
                )
            named[index] = value.strip() if split else value
        else:
            bare.append(part)
    shown = _given(texts)
    if named and bare:
        raise InputError(
            option("group", Verbatim(shown)) + " mixes COL=VALUE and bare values",
            hint="give every value as COL=VALUE, or all of them bare in the key's column "
            f"order ({', '.join(names)})",
        )
    if named:
        missing = [name for i, name in enumerate(names) if i not in named]
        if missing:
            raise InputError(
                option("group", Verbatim(shown)) + f" gives no value for {', '.join(missing)}",
                hint=_key_form(group_cols, names),
            )
        return tuple(named[i] for i in range(len(group_cols)))
    if len(bare) != len(group_cols):
        plural = "" if len(bare) == 1 else "s"
        raise InputError(
            option("group", Verbatim(shown))
            + f" gives {len(bare)} value{plural} for {len(group_cols)} key "
            f"column{'' if len(group_cols) == 1 else 's'} ({', '.join(names)})",
            hint=_key_form(group_cols, names),
        )
    return tuple(bare)


def _given(texts: tuple[str, ...]) -> str:
    """The ``--group`` values as the user gave them, for a message."""
    return ", ".join(repr(t) for t in texts)


def _key_form(group_cols: tuple[str, ...], names: tuple[str, ...]) -> Message:
    form = ",".join(name.upper() for name in names)
    if group_cols[-1] == POSITION_KEY and len(names) > 1:
        return (
            f"give {form}, GROUP_INDEX counting the runs of "
            + option("group_size")
            + f" rows within each {names[0]} from 0"
        )
    if len(names) == 1:
        return f"give one value: the {names[0]} of the group"
    repeated = option("group", tuple(f"{name}=..." for name in names))
    return f"give one value per column, comma-separated: {form}; values with commas: " + repeated


def _key_strings(frame: pl.DataFrame, group_cols: tuple[str, ...]) -> pl.Series:
    """The distinct keys of ``frame`` in order of appearance, as ``--group`` takes them."""
    return (
        frame.select(pl.concat_str([pl.col(c).cast(pl.String) for c in group_cols], separator=","))
        .to_series()
        .unique(maintain_order=True)
    )


def _listed(keys: pl.Series, group_cols: tuple[str, ...], most: int) -> str:
    """The first ``most`` of ``keys`` and how many more there are."""
    separator = "; " if len(group_cols) > 1 else ", "  # composite keys hold commas
    shown = separator.join("null" if k is None else k for k in keys.head(most).to_list())
    more = f" (and {keys.len() - most} more)" if keys.len() > most else ""
    return f"{shown}{more}"


def existing_keys(full: pl.DataFrame, group_cols: tuple[str, ...]) -> str:
    """``existing keys: ...``: the first few keys of ``full``, as ``--group`` takes them."""
    return f"existing keys: {_listed(_key_strings(full, group_cols), group_cols, SHOWN_KEYS)}"


def select_group(
    full: pl.DataFrame, group_cols: tuple[str, ...], texts: tuple[str, ...], names: tuple[str, ...]
) -> tuple[pl.DataFrame, bool]:
    """The rows of the group whose key reads ``texts`` (see :func:`parse_key`), and whether
    they name it exactly; failing an exact match, the rows of the one group whose key values
    start with the values given. An error lists a few existing keys, or the candidates of
    an ambiguous prefix. ``names``: the key columns as the user knows them (see
    SHOWN_NAMES)."""
    try:
        values = parse_key(texts, group_cols, names)
    except InputError as exc:
        within = _within_one_step(full, group_cols, texts, names)
        if within is not None:
            return within
        exc.hint_text = as_text(exc.hint_text or "None") + f"; {existing_keys(full, group_cols)}"
        raise
    strings = [pl.col(c).cast(pl.String) for c in group_cols]
    exact = full.filter(pl.all_horizontal(s == v for s, v in zip(strings, values, strict=True)))
    if exact.height:
        return exact, True
    rows = full.filter(
        pl.all_horizontal(s.str.starts_with(v) for s, v in zip(strings, values, strict=True))
    )
    candidates = _key_strings(rows, group_cols)
    if candidates.len() > 1:
        raise InputError(
            option("group", Verbatim(_given(texts)))
            + f" is the start of {candidates.len()} groups' keys: "
            f"{_listed(candidates, group_cols, SHOWN_CANDIDATES)}",
            hint="give more of the key, so that it starts one group's key only (or all of it)",
        )
    if rows.height == 0:
        raise InputError(
            f"no group {_given(texts)} in {', '.join(names)}",
            hint=existing_keys(full, group_cols),
        )
    return rows, False


def _within_one_step(
    full: pl.DataFrame,
    group_cols: tuple[str, ...],
    texts: tuple[str, ...],
    names: tuple[str, ...],
) -> tuple[pl.DataFrame, bool] | None:
    """A key led by a step column (groups form within each step) named without its step
    (``--group p007``): :func:`select_group` of the one group with that prompt key, or an
    error listing the steps it is a group in; None when the key is not led by a step or the
    values do not name the rest of it."""
    if len(group_cols) < 2 or group_cols[0] not in STEP_COLUMNS or POSITION_KEY in group_cols:
        return None
    parts = texts[0].split(",") if len(texts) == 1 else list(texts)
    if len(parts) != len(group_cols) - 1 or any("=" in part for part in parts):
        return None
    rows, exact = select_group(full, group_cols[1:], texts, names[1:])
    candidates = _key_strings(rows, group_cols)
    if candidates.len() > 1:
        steps = rows[group_cols[0]].unique(maintain_order=True)
        raise InputError(
            option("group", Verbatim(_given(texts)))
            + f" is a group in {steps.len()} values of {names[0]}: "
            f"{_listed(candidates, group_cols, SHOWN_CANDIDATES)}",
            hint=f"give the {names[0]} too, e.g. " + option("group", Verbatim(candidates[0])),
        )
    return rows, exact


def pick_row(
    full: pl.DataFrame, group_cols: tuple[str, ...], pick: str, advantage_col: str
) -> tuple[int, Message]:
    """The position in ``full`` (input order) of the first row of the group ``--pick``
    names, and how it was found: ``worst``, the first row whose |advantage| is the largest
    of the log; else the first row of the first group that is constant (``zero-variance``)
    or has one valid reward (``singleton``). An error when there is none."""
    named = option("pick", pick)
    if pick == "worst":
        sizes = full.select(pl.col(advantage_col).cast(pl.Float64).fill_nan(None).abs())
        if sizes.to_series().max() is None:
            raise InputError(
                named + " finds no advantage: every advantage of the log is null",
                hint="give " + GROUP_OR_ROW,
            )
        position = int(sizes.to_series().arg_max() or 0)
        largest = fmt(full[advantage_col][position])
        return position, named + (
            f": input row {position} has the largest |advantage| of the log ({largest})"
        )
    over = list(group_cols)
    reward = pl.col(REWARD_KEY)
    valid = reward.count().over(over)
    if pick == "singleton":
        found = valid == 1
        missing = "no group has exactly one valid reward"
        how = "the first group with exactly one valid reward"
    else:
        found = (valid >= 2) & (reward.min().over(over) == reward.max().over(over))
        missing = "no group has two or more valid rewards, all equal"
        how = "the first group whose valid rewards (two or more) are equal"
    hits = full.select(found.fill_null(False)).to_series()
    if not hits.any():
        raise InputError(
            named + f" finds no group: {missing}",
            hint=f"pick another ({', '.join(p for p in PICKS if p != pick)}), or give "
            + GROUP_OR_ROW,
        )
    return int(hits.arg_true()[0]), named + f": {how}"


def _group_at(full: pl.DataFrame, group_cols: tuple[str, ...], position: int) -> pl.DataFrame:
    """The rows of ``full`` (in order) whose ``group_cols`` equal those of its row at
    ``position``: its group, or its batch (a null value matches null)."""
    first = full.row(position, named=True)
    return full.filter(
        pl.all_horizontal(
            pl.col(c).eq_missing(pl.lit(first[c], dtype=full.schema[c])) for c in group_cols
        )
    )


def cut(value: Any, width: int = TEXT_WIDTH) -> str | None:
    """The start of a response's text, on one line, at most ``width`` characters and an
    ellipsis (a chat-format response: the contents of its messages)."""
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("content", value)
    elif isinstance(value, list):
        value = " ".join(
            str(item.get("content", item)) if isinstance(item, dict) else str(item)
            for item in value
        )
    text = one_line(" ".join(str(value).split()))
    return text if len(text) <= width else f"{text[:width].rstrip()}…"


def explain_group(
    group_rows: pl.DataFrame,
    options: AdvantageOptions,
    estimator: Estimator,
    batch: pl.DataFrame | None,
    logged: pl.Series | None,
    key: dict[str, Any],
    chosen: Message | None,
    group_keys: tuple[str, ...],
) -> Explanation:
    """Explain ``group_rows`` (one group, with ROW_KEY, REWARD_KEY and the advantage
    column) by the options' ``estimator``; ``batch``: the rows of its batch, for a formula
    that reads batch statistics (its groups told apart by ``group_keys``); ``logged``: the
    advantages the input carried, shown beside ours; ``key``: the group's key as shown;
    ``chosen``: how the group was found. Each response's step (STEP_COL, unless part of the
    key) and the start of its text (the first of TEXT_COLS) come along when the log has
    them."""
    size = group_rows.height
    rewards = _floats(group_rows[REWARD_KEY])
    filled = _fill_in(group_rows, batch, group_keys, options, estimator)
    notes: list[str] = []
    if "constant" in filled.overrides:
        notes.append("every valid reward is equal: zero variance, every advantage is exactly 0")
    steps = filled.steps
    if not filled.per_reward:
        valid = [r for r in rewards if r is not None]
        steps = _steps(valid, filled.mean, filled.var, options) + steps
    numbers = group_rows[ROW_KEY].to_list()
    # A step that is part of the key is the same on every row: the heading shows it.
    step_col = STEP_COL if STEP_COL in group_rows.columns and STEP_COL not in key else None
    step_values = group_rows[step_col].to_list() if step_col else [None] * size
    text_col = next((c for c in TEXT_COLS if c in group_rows.columns), None)
    texts = [cut(v) for v in group_rows[text_col].to_list()] if text_col else [None] * size
    if options.reward_clip is not None:
        steps = (*_clip_lines(group_rows, options, filled.per_reward), *steps)
    summed = options.reward_cols if len(options.reward_cols) > 1 and not filled.per_reward else ()
    parts: list[tuple[float | None, ...]] = [()] * size
    if summed:
        parts = group_rows.select(reward_expr(c) for c in summed).rows()
        terms = " + ".join(f"{fmt(w)} x {c}" for w, c in zip(options.weights, summed, strict=True))
        steps = (f"r = {terms} (a None counts 0)", *steps)
        for values, number in zip(parts, numbers, strict=True):
            missing = [c for c, v in zip(summed, values, strict=True) if v is None]
            if 0 < len(missing) < len(summed):  # all None: no reward, its policy says so
                notes.append(f"row {number}: {', '.join(missing)} is None, counted as 0 in r")
    rows = [
        ExplainedRow(
            reward,
            "-" if reward is None else formula,
            None if reward is None else value,
            advantage,
            _policy(name, options),
            was,
            number,
            step,
            text,
            part,
        )
        for reward, (formula, value), name, advantage, was, number, step, text, part in zip(
            rewards,
            filled.rows,
            filled.overrides,
            _floats(group_rows[options.advantage_col]),
            [None] * size if logged is None else _floats(logged),
            numbers,
            step_values,
            texts,
            parts,
            strict=True,
        )
    ]
    var = filled.var
    return Explanation(
        key=key,
        options=options,
        estimator_summary=estimator.summary,
        formula=filled.formula,
        size=size,
        n=filled.n,
        mean=filled.mean,
        var=var,
        std=None if var is None else math.sqrt(var),
        steps=steps,
        rows=tuple(rows),
        notes=tuple(notes),
        logged=logged is not None,
        step_col=step_col,
        text_col=text_col,
        chosen=chosen,
        reward_cols=summed,
    )


def _clip_lines(
    group_rows: pl.DataFrame, options: AdvantageOptions, per_reward: bool
) -> tuple[str, ...]:
    """The reward clip (``reward_clip``) and the rewards of the group it changed (the
    combined reward's; each column's under GDPO)."""
    lo, hi = options.reward_clip or (0.0, 0.0)
    unclipped = replace(options, reward_clip=None)
    names = options.reward_cols if per_reward else ("r",)
    before = group_rows.select(
        reward_parts(unclipped) if per_reward else combined_reward(unclipped)
    )
    after = group_rows.select(reward_parts(options) if per_reward else combined_reward(options))
    changed = [
        f"{name} {fmt(a)} -> {fmt(b)} (row {row})"
        for name, was, now in zip(names, before.get_columns(), after.get_columns(), strict=True)
        for a, b, row in zip(_floats(was), _floats(now), group_rows[ROW_KEY], strict=True)
        if a != b
    ]
    what = "each reward column" if per_reward else "the reward r"
    return (
        f"{what} clamped to [{fmt(lo)}, {fmt(hi)}] before any statistic"
        + (f": {', '.join(changed)}" if changed else ": none outside"),
    )


def _floats(values: pl.Series) -> list[float | None]:
    """``values`` as floats, None for null or NaN."""
    return values.cast(pl.Float64).fill_nan(None).to_list()


def _steps(
    valid: list[float], mean: float | None, var: float | None, options: AdvantageOptions
) -> tuple[str, ...]:
    """The lines that state the group's n, mean, var and std (the formula's: see
    :class:`grpo_cli.report.explain_context.FilledIn`) with the valid rewards."""
    n, ddof = len(valid), options.ddof
    if n == 0:
        return ("no valid reward in this group",)
    if n == 1 and options.singleton == "verl":
        return (
            "n = 1 valid reward",
            "mean = 0, std = 1 (singleton=verl: verl's one-response group has mean 0 and std 1)",
        )
    shown = signed_sum(valid) if n <= 16 else f"... ({n} values)"
    plural = "" if n == 1 else "s"
    lines = [f"n = {n} valid reward{plural}", f"mean = ({shown}) / {n} = {fmt(mean)}"]
    if var is None:
        lines.append(f"std (ddof={ddof}) is undefined with n = {n}")
    else:
        squares = (
            " + ".join(f"({fmt(r)} - {fmt(mean)})^2" for r in valid)
            if n <= 4
            else f"sum of (r - {fmt(mean)})^2"
        )
        total = math.fsum((r - mean) ** 2 for r in valid) if mean is not None else 0.0
        lines.append(
            f"var (ddof={ddof}) = ({squares}) / ({n} - {ddof}) = {fmt(total)} / {n - ddof} "
            f"= {fmt(var)}"
        )
        lines.append(f"std = sqrt(var) = {fmt(math.sqrt(var))}")
    return tuple(lines)


def _fill_in(
    group_rows: pl.DataFrame,
    batch: pl.DataFrame | None,
    group_keys: tuple[str, ...],
    options: AdvantageOptions,
    estimator: Estimator,
) -> FilledIn:
    """The formula filled in for ``group_rows`` (see
    :mod:`grpo_cli.report.explain_context`), evaluated over ``batch`` (the rows of its
    batch) when given, else over the group."""
    rows = group_rows if batch is None else batch
    where = {row: i for i, row in enumerate(rows[ROW_KEY].to_list())}
    keys = [c for c in group_keys if c in rows.columns] or [ROW_KEY]
    ids: dict[tuple[Any, ...], int] = {}
    groups = [ids.setdefault(k, len(ids)) for k in rows.select(keys).iter_rows()]
    lengths = None
    if options.length_col and options.length_col in rows.columns:
        lengths = _floats(rows[options.length_col])
    read = rows.select(reward.alias(f"r{i}") for i, reward in enumerate(reward_parts(options)))
    columns = [column.to_list() for column in read.get_columns()]
    shown = [where[row] for row in group_rows[ROW_KEY].to_list()]
    return fill_in(estimator, options, _floats(rows[REWARD_KEY]), groups, shown, lengths, columns)


def _policy(name: str | None, options: AdvantageOptions) -> Message | None:
    """What the rule ``name`` (see :class:`grpo_cli.report.explain_context.FilledIn`) did
    to a row's advantage, for the reader."""
    if name == "nulls":
        nulls = "zero" if options.nulls == "zero" else "exclude"
        value = "0" if nulls == "zero" else "null"
        return (
            f"null reward: left out of the statistics; advantage {value} ("
            + option("nulls", nulls)
            + ")"
        )
    if name == "singleton":
        value = {"zero": "0", "raw": "the raw reward", "null": "null"}[options.singleton]
        return (
            f"only valid reward of its group: advantage {value} ("
            + option("singleton", options.singleton)
            + ")"
        )
    if name == "constant":
        return "zero-variance group: advantage exactly 0"
    if name == "clip" and options.clip is not None:
        return f"clipped to [{fmt(options.clip[0])}, {fmt(options.clip[1])}]"
    return None


def run_explain(
    inputs: Sequence[str | Path],
    key: str | Sequence[str] | None = None,
    *,
    row: int | None = None,
    pick: str | None = None,
    preset: str | None = None,
    options: Mapping[str, Any] | None = None,
    input_format: str | None = None,
) -> Explanation:
    """Explain one group of the log in ``inputs`` (files, folders or globs; empty: standard
    input when it is a pipe or a file) read as ``input_format`` (None: from the suffixes),
    as ``grpo-adv explain`` does: the choice of group (``key``, ``row``, ``pick``) checked
    before any input is read, then :func:`explain_one` with ``preset`` and ``options``
    (the CLI's keywords; ``advantage_col``: the logged advantages shown beside, default
    ``advantage``, else verl's ``advantages``)."""
    from grpo_cli.jobs.outputs import input_paths, read_input, sources_or_stdin

    check_choice(key, row, pick)  # before any input is read
    explicit = dict(options or {})
    key_cols = tuple(explicit.get("group_cols", DEFAULT_GROUP_COLS))
    log = read_input(
        input_paths(sources_or_stdin([str(s) for s in inputs])), input_format, key_cols
    )
    explained = explain_one(log.frame, preset, explicit, key, row=row, pick=pick)
    return replace(explained, warnings=(*log.warnings, *explained.warnings))


def _one_group(estimator: Estimator) -> None:
    """Refuse an estimator explain cannot show one group of."""
    if estimator.unit == "step":
        raise InputError("explain does not cover process supervision", hint="use compute")
    if not estimator.uses_groups:
        raise OptionsError(
            f"explain shows one group; estimator {estimator.name} has no groups",
            hint="explain a group estimator (e.g. "
            + option("estimator", "grpo")
            + "), or use compute",
        )


def explain_one(
    frame: pl.DataFrame,
    preset: str | None,
    explicit: dict[str, Any],
    key: str | Sequence[str] | None = None,
    *,
    row: int | None = None,
    pick: str | None = None,
) -> Explanation:
    """Compute the log as ``compute`` would (preset, layout, options), then explain the
    group whose key reads ``key`` (:func:`select_group`), the one of input row ``row``
    (from 0), or the one ``pick`` names (exactly one of the three).

    Positional groups (``group_size``) are keyed ``BATCH,GROUP_INDEX`` (``step,group_index``
    for a TRL log; GROUP_INDEX alone without a batch column), GROUP_INDEX counting the runs
    of group_size rows within the batch value from 0; a verl dump's uid-derived key column
    is named ``uid``. ``backend`` and ``device`` are ignored: explain computes with Polars.
    """
    from grpo_cli.core.columns import logged_advantage
    from grpo_cli.core.layouts import per_response
    from grpo_cli.core.resolve import derive, make_request, resolve
    from grpo_cli.core.run_summary import check_batch_spans, span_warnings
    from grpo_cli.jobs.compute import annotate_frame

    texts = check_choice(key, row, pick)
    # where the arithmetic runs is no option of what it computes: explain always runs it
    # with Polars (it needs the group statistics columns the Polars pipeline leaves)
    explicit, _ = split_engine(explicit)
    column = logged_advantage(frame.columns, explicit.get("advantage_col"))
    request = make_request(preset, {**explicit, "advantage_col": column}, refuse=_one_group)
    frame, tokens = per_response(frame, column)
    has_logged = column in frame.columns
    # An annotated log: recompute, and show the logged values beside. The logged column is
    # left out while a dump layout picks its reward columns.
    source = frame.drop(column) if has_logged else frame
    plan = resolve(request, source)
    options = plan.options
    source = derive(source, plan)
    if has_logged:
        source = source.with_columns(frame[column].alias(LOGGED_KEY))
    full, plan = annotate_frame(source, plan)
    keys = plan.keys
    check_batch_spans(full, plan)  # what compute refuses, explain refuses
    warned = span_warnings(full, plan)  # and what it warns about, it warns about
    full = full.with_row_index(ROW_KEY)  # the engines keep the input's row order
    names = tuple(SHOWN_NAMES.get(c, c) for c in keys.exact)
    chosen: Message | None = None
    if texts:
        rows, exact = select_group(full, keys.exact, texts, names)
        if not exact:
            chosen = (
                option("group", Verbatim(_given(texts)))
                + ": the only group whose key starts that way"
            )
    elif row is not None:
        if row >= full.height:
            plural = "" if full.height == 1 else "s"
            raise InputError(
                option("row", row)
                + f" is past the end of the log: it has {full.height:,} row{plural}",
                hint=f"rows are numbered from 0 to {full.height - 1:,}, in the order read"
                if full.height
                else "the log is empty",
            )
        rows = _group_at(full, keys.exact, row)
        chosen = option("row", row) + f": the group of input row {row}"
    else:
        assert pick is not None
        position, chosen = pick_row(full, keys.exact, pick, options.advantage_col)
        rows = _group_at(full, keys.exact, position)
    position = rows[ROW_KEY][0]
    batch = _group_at(full, keys.batch, position) if reads_batch(options, plan.estimator) else None
    logged = rows[LOGGED_KEY].cast(pl.Float64, strict=False) if has_logged else None
    shown = {name: rows[c][0] for c, name in zip(keys.exact, names, strict=True)}
    explained = explain_group(
        rows, options, plan.estimator, batch, logged, shown, chosen, group_keys=keys.exact
    )
    return replace(explained, warnings=(*plan.notes, *warned, *([tokens] if tokens else [])))

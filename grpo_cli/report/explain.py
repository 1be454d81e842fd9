"""``explain``: one group's advantages with every number of the formula filled in, the way
the reference lessons teach it (no Rich here; :mod:`grpo_cli.cli.render` draws it).

The statistics are recomputed here in plain Python floats, from the group's valid rewards:

    n = number of valid rewards, mean = sum(r) / n,
    var = sum((r - mean)^2) / (n - ddof), std = sqrt(var)

and each response's advantage is written out with the estimator's formula. The value shown
as the advantage is the one ``compute`` writes (the same pipeline), so a test can check the
filled-in arithmetic against it. Policies that override the formula (null reward, one-reward
group, zero-variance group, clip) are stated per row.

The group is chosen in one of three ways (exactly one; see :func:`check_choice`):

* ``--group``: its key, one value per key column (see :func:`parse_key`); each value may be
  the start of its column's value when exactly one group's key starts that way
  (:func:`select_group`);
* ``--row N``: the group of the input's row ``N``, counting from 0 in the order read;
* ``--pick``: ``worst``, the group holding the largest |advantage| ``compute`` writes;
  ``zero-variance``, the first group (in input order) with two or more valid rewards, all
  equal; ``singleton``, the first group with exactly one valid reward (see
  :func:`pick_row`).
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
from grpo_cli.core.plan import Keys
from grpo_cli.core.rewards import reward_expr
from grpo_cli.report.explain_context import (
    FilledIn,
    fill_in,
    fmt,
    mean_var,
    norm_filled,
    signed_sum,
    spread_symbol,
)


def filled() -> tuple[str, ...]:
    """The estimators explain writes out with numbers: every one with groups and one
    advantage per response (their formula evaluated by :mod:`grpo_cli.report.explain_context`)."""
    from grpo_cli.core.estimators import ESTIMATORS

    return tuple(name for name, e in ESTIMATORS.items() if e.uses_groups and e.unit == "response")


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
    example = (
        "e.g. "
        + option("group", Verbatim("p007"))
        + ", "
        + option("row", 0)
        + " or "
        + option("pick", "worst")
    )
    if not given:
        raise OptionsError(
            "explain needs a group: give "
            + option("group", Verbatim("KEY"))
            + ", "
            + option("row", Verbatim("N"))
            + " or "
            + option("pick", Verbatim("WHICH")),
            hint=example,
        )
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
    text: str | Sequence[str],
    group_cols: tuple[str, ...],
    names: tuple[str, ...] | None = None,
) -> tuple[str, ...]:
    """The ``--group`` value(s) as one value per group column; ``names``: the columns as the
    user knows them (derived ones differ, see SHOWN_NAMES).

    One ``--group`` of a composite key is split on commas (``1,p015``); repeated ones give
    one value each, so a value may hold commas (``--group step=1 --group "prompt=a, b"``).
    Each value is bare (the columns in order) or ``COL=VALUE`` (any order; COL a key
    column, so a value that starts with ``COL=`` is written ``COL=COL=...``); not both."""
    names = names or group_cols
    texts = (text,) if isinstance(text, str) else tuple(text)
    if len(texts) == 1 and len(group_cols) > 1:
        parts = tuple(p.strip() for p in texts[0].split(","))
    else:
        parts = texts
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
            named[index] = value.strip() if len(texts) == 1 and len(group_cols) > 1 else value
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
    full: pl.DataFrame,
    group_cols: tuple[str, ...],
    text: str | Sequence[str],
    names: tuple[str, ...] | None = None,
) -> pl.DataFrame:
    """The rows of the group whose key reads ``text`` (see :func:`parse_key`); failing an
    exact match, of the one group whose key values start with the values given. An error
    lists a few existing keys, or the candidates of an ambiguous prefix. ``names``: the key
    columns as the user knows them (derived ones differ, see SHOWN_NAMES)."""
    names = names or group_cols
    texts = (text,) if isinstance(text, str) else tuple(text)
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
        return exact
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
    return rows


def _within_one_step(
    full: pl.DataFrame,
    group_cols: tuple[str, ...],
    texts: tuple[str, ...],
    names: tuple[str, ...],
) -> pl.DataFrame | None:
    """A key led by a step column (groups form within each step) named without its step
    (``--group p007``): the rows of the one group with that prompt key, or an error listing
    the steps it is a group in; None when the key is not led by a step or the values do
    not name the rest of it."""
    if len(group_cols) < 2 or group_cols[0] not in STEP_COLUMNS or POSITION_KEY in group_cols:
        return None
    parts = texts[0].split(",") if len(texts) == 1 else list(texts)
    if len(parts) != len(group_cols) - 1 or any("=" in part for part in parts):
        return None
    rows = select_group(full, group_cols[1:], texts, names[1:])
    candidates = _key_strings(rows, group_cols)
    if candidates.len() > 1:
        steps = rows[group_cols[0]].unique(maintain_order=True)
        raise InputError(
            option("group", Verbatim(_given(texts)))
            + f" is a group in {steps.len()} values of {names[0]}: "
            f"{_listed(candidates, group_cols, SHOWN_CANDIDATES)}",
            hint=f"give the {names[0]} too, e.g. " + option("group", Verbatim(candidates[0])),
        )
    return rows


def _named_exactly(
    rows: pl.DataFrame, group_cols: tuple[str, ...], texts: tuple[str, ...], names: tuple[str, ...]
) -> bool:
    """Whether ``texts`` name the key of the group ``rows`` in full (not a prefix of it);
    a key led by a step column may be named without its step (see
    :func:`_within_one_step`)."""
    try:
        values = parse_key(texts, group_cols, names)
    except InputError:
        group_cols, names = group_cols[1:], names[1:]
        values = parse_key(texts, group_cols, names)
    return bool(_key_strings(rows, group_cols).item() == ",".join(values))


def pick_row(full: pl.DataFrame, group_cols: tuple[str, ...], pick: str, advantage_col: str) -> int:
    """The position in ``full`` (input order) of the first row of the group ``--pick``
    names (see the module docstring): ``worst``, the first row whose |advantage| is the
    largest of the log; else the first row of the first group that is constant
    (``zero-variance``) or has one valid reward (``singleton``). An error when there is
    none."""
    over = list(group_cols)
    if pick == "worst":
        size = pl.col(advantage_col).cast(pl.Float64).fill_nan(None).abs()
        sizes = full.select(size).to_series()
        largest = sizes.max()
        if largest is None:
            raise InputError(
                option("pick", "worst") + " finds no advantage: every advantage of the log is null",
                hint="give "
                + option("group", Verbatim("KEY"))
                + " or "
                + option("row", Verbatim("N")),
            )
        return int(sizes.arg_max() or 0)
    reward = pl.col(REWARD_KEY)
    valid = reward.count().over(over)
    if pick == "singleton":
        found = valid == 1
        missing = "no group has exactly one valid reward"
    else:
        found = (valid >= 2) & (reward.min().over(over) == reward.max().over(over))
        missing = "no group has two or more valid rewards, all equal"
    hits = full.select(found.fill_null(False)).to_series()
    if not hits.any():
        raise InputError(
            option("pick", pick) + f" finds no group: {missing}",
            hint=f"pick another ({', '.join(p for p in PICKS if p != pick)}), or give "
            + option("group", Verbatim("KEY"))
            + " or "
            + option("row", Verbatim("N")),
        )
    return int(hits.arg_true()[0])


def _group_at(full: pl.DataFrame, group_cols: tuple[str, ...], position: int) -> pl.DataFrame:
    """The rows of the group of ``full``'s row at ``position`` (a null key value matches
    null)."""
    first = full.row(position, named=True)
    return full.filter(
        pl.all_horizontal(
            pl.col(c).eq_missing(pl.lit(first[c], dtype=full.schema[c])) for c in group_cols
        )
    )


def _row_of(full: pl.DataFrame, row: int) -> int:
    """The position in ``full`` of the input's row ``row`` (an error past the last)."""
    if row >= full.height:
        plural = "" if full.height == 1 else "s"
        raise InputError(
            option("row", row) + f" is past the end of the log: it has {full.height:,} row{plural}",
            hint=f"rows are numbered from 0 to {full.height - 1:,}, in the order read"
            if full.height
            else "the log is empty",
        )
    return row


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
    batch: pl.DataFrame | None = None,
    logged: pl.Series | None = None,
    key: dict[str, Any] | None = None,
    gdpo: GdpoView | None = None,
    chosen: Message | None = None,
    group_keys: tuple[str, ...] = (),
) -> Explanation:
    """Explain ``group_rows`` (one group, with REWARD_KEY and the advantage column);
    ``batch``: the rows of its batch (with ROW_KEY and the key columns), for an estimator
    that reads batch statistics (its groups told apart by ``group_keys``);
    ``logged``: the advantages the input carried for these rows, shown beside ours;
    ``key``: the group's key as shown (default: its ``group_cols`` values); ``gdpo``: the
    per-reward values and the batch's ``s`` under ``aggregation=normalize_then_sum``;
    ``chosen``: how the group was found; ``estimator``: the options' estimator, looked up
    by the caller (the plan's). Each response's input row (ROW_KEY), step (STEP_COL,
    unless it is part of the key) and the start of its text (the first of TEXT_COLS) come
    along when ``group_rows`` has them."""
    rewards = [_float(v) for v in group_rows[REWARD_KEY].to_list()]
    advantages = [_float(v) for v in group_rows[options.advantage_col].to_list()]
    logged_values = (
        [_float(v) for v in logged.to_list()] if logged is not None else [None] * len(rewards)
    )
    valid = [r for r in rewards if r is not None]
    n = len(valid)
    ddof = options.ddof
    mean = math.fsum(valid) / n if n else None
    var = (
        math.fsum((r - mean) ** 2 for r in valid) / (n - ddof)
        if mean is not None and n > ddof
        else None
    )
    if options.singleton == "verl" and n == 1:  # verl's one-response group: mean 0, std 1
        mean, var = 0.0, 1.0
    std = math.sqrt(var) if var is not None else None
    steps = _steps(valid, n, mean, var, std, ddof, options.singleton)
    notes: list[str] = []
    if gdpo is not None:
        # GDPO: no zero-variance rule on the summed reward (each reward is z-scored alone).
        constant = False
        gdpo_steps, formulas = _gdpo_formulas(gdpo, options)
        steps = (
            f"n = {n} valid rewards; aggregation normalize_then_sum: each reward column is "
            "z-scored in the group on its own",
            *gdpo_steps,
        )
    else:
        filled = _fill_in(group_rows, batch, group_keys or options.group_cols, options, estimator)
        steps += filled.steps
        constant = n >= 2 and max(valid) == min(valid)
        if constant:
            notes.append("every valid reward is equal: zero variance, every advantage is exactly 0")
        formulas = [
            ("-", None) if r is None else row for r, row in zip(rewards, filled.rows, strict=True)
        ]
    # compute clips the final advantage unless a whitening clipped its input (clip_stage).
    whitened = gdpo is not None or estimator.whitens
    clips_final = options.clip is not None and (options.clip_stage == "advantage" or not whitened)
    if key is None:
        key = {c: group_rows[c][0] for c in options.group_cols if c in group_rows.columns}
    size = group_rows.height
    numbers = group_rows[ROW_KEY].to_list() if ROW_KEY in group_rows.columns else [None] * size
    # A step that is part of the key is the same on every row: the heading shows it.
    step_col = STEP_COL if STEP_COL in group_rows.columns and STEP_COL not in key else None
    step_values = group_rows[step_col].to_list() if step_col else [None] * size
    text_col = next((c for c in TEXT_COLS if c in group_rows.columns), None)
    texts = [cut(v) for v in group_rows[text_col].to_list()] if text_col else [None] * size
    summed = options.reward_cols if len(options.reward_cols) > 1 and gdpo is None else ()
    parts = _parts(group_rows, summed)
    if summed:
        terms = " + ".join(f"{fmt(w)} x {c}" for w, c in zip(options.weights, summed, strict=True))
        steps = (f"r = {terms} (a None counts 0)", *steps)
        notes += _none_notes(summed, parts, numbers)
    rows = []
    for reward, advantage, was, (formula, value), number, step, text, part in zip(
        rewards,
        advantages,
        logged_values,
        formulas,
        numbers,
        step_values,
        texts,
        parts,
        strict=True,
    ):
        policy = _policy(reward, n, constant, options)
        if policy is None and value is not None and clips_final and options.clip is not None:
            lo, hi = options.clip
            if value < lo or value > hi:
                policy = f"clipped to [{fmt(lo)}, {fmt(hi)}]"
        rows.append(
            ExplainedRow(reward, formula, value, advantage, policy, was, number, step, text, part)
        )
    return Explanation(
        key=key,
        options=options,
        estimator_summary=estimator.summary,
        formula=gdpo_formula(options) if gdpo is not None else filled.formula,
        size=group_rows.height,
        n=n,
        mean=mean,
        var=var,
        std=std,
        steps=steps,
        rows=tuple(rows),
        notes=tuple(notes),
        logged=logged is not None,
        step_col=step_col,
        text_col=text_col,
        chosen=chosen,
        reward_cols=summed,
    )


def _parts(group_rows: pl.DataFrame, columns: tuple[str, ...]) -> list[tuple[float | None, ...]]:
    """Each row's value of each of ``columns`` as a float (None for null or NaN, whatever
    the null policy makes of it); empty tuples without columns."""
    if not columns:
        return [()] * group_rows.height
    return [
        tuple(_float(v) for v in values)
        for values in group_rows.select(reward_expr(c) for c in columns).iter_rows()
    ]


def _none_notes(
    columns: tuple[str, ...], parts: list[tuple[float | None, ...]], numbers: list[Any]
) -> list[str]:
    """One note per row where some but not all of the summed ``columns`` are None (a row
    where all are has no reward: its policy says so)."""
    notes = []
    for i, (values, number) in enumerate(zip(parts, numbers, strict=True)):
        missing = [c for c, v in zip(columns, values, strict=True) if v is None]
        if missing and len(missing) < len(columns):
            where = f"row {number}" if number is not None else f"response {i}"
            notes.append(f"{where}: {', '.join(missing)} is None, counted as 0 in r")
    return notes


def _float(value: Any) -> float | None:
    if value is None:
        return None
    f = float(value)
    return None if math.isnan(f) else f


def _steps(
    valid: list[float],
    n: int,
    mean: float | None,
    var: float | None,
    std: float | None,
    ddof: int,
    singleton: str,
) -> tuple[str, ...]:
    if n == 0:
        return ("no valid reward in this group",)
    if n == 1 and singleton == "verl":
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
        lines.append(f"std = sqrt(var) = {fmt(std)}")
    return tuple(lines)


@dataclass(frozen=True)
class GdpoView:
    """What GDPO (``aggregation=normalize_then_sum``) needs: each reward column's values
    for the group's rows, and the batch's values of ``s = sum_k w_k z_k`` (clipped first
    under clip_stage shaped) with their weights (token counts when token_weighted)."""

    columns: tuple[str, ...]
    weights: tuple[float, ...]
    values: tuple[list[float | None], ...]
    batch: list[tuple[float, float]]


@dataclass(frozen=True)
class _ZStats:
    """One reward column in one group: its valid count, mean and variance (ddof), the
    ``singleton=verl`` unit statistics, and whether its valid values are all equal."""

    n: int
    mean: float | None
    var: float | None
    constant: bool
    unit: bool


def _zstats(values: list[float | None], options: AdvantageOptions) -> _ZStats:
    valid = [v for v in values if v is not None]
    n = len(valid)
    if options.singleton == "verl" and n == 1:
        return _ZStats(n, 0.0, 1.0, False, True)
    if not n:
        return _ZStats(0, None, None, False, False)
    mean, var = mean_var(valid, options.ddof)
    return _ZStats(n, mean, var, n >= 2 and max(valid) == min(valid), False)


def _zscore(v: float | None, st: _ZStats, options: AdvantageOptions) -> float | None:
    """z of one reward value in its group (compute's grpo on that reward alone)."""
    if v is None or st.mean is None:
        return None
    if st.constant:
        return 0.0
    if st.var is None:
        return None
    return (v - st.mean) / norm_filled(options, st.var)[1]


def gdpo_sums(
    values: tuple[list[float | None], ...] | list[list[float | None]],
    options: AdvantageOptions,
) -> tuple[list[float | None], list[list[float | None]], list[_ZStats]]:
    """For one group: ``s = sum_k w_k z_k`` per row (null when every reward of the row is
    null; a null z counts 0), the z of each reward column, and each column's statistics."""
    stats = [_zstats(list(column), options) for column in values]
    zs = [
        [_zscore(v, st, options) for v in column] for column, st in zip(values, stats, strict=True)
    ]
    sums: list[float | None] = []
    for i in range(len(values[0]) if values else 0):
        if all(column[i] is None for column in values):
            sums.append(None)
            continue
        terms = [
            w * zi for w, z in zip(options.weights, zs, strict=True) if (zi := z[i]) is not None
        ]
        sums.append(float(sum(terms)))
    return sums, zs, stats


def _weightedmean_var(pairs: list[tuple[float, float]], ddof: int) -> tuple[float, float]:
    total = math.fsum(w for _, w in pairs)
    mean = math.fsum(x * w for x, w in pairs) / total
    return mean, math.fsum(w * (x - mean) ** 2 for x, w in pairs) / (total - ddof)


def _gdpo_formulas(
    gdpo: GdpoView, options: AdvantageOptions
) -> tuple[tuple[str, ...], list[tuple[str, float | None]]]:
    """The lines that state each reward's group statistics and the batch whitening of s,
    and each row's formula with its value."""
    ddof = options.ddof
    sums, zs, stats = gdpo_sums(gdpo.values, options)
    lines = []
    for column, weight, st in zip(gdpo.columns, gdpo.weights, stats, strict=True):
        head = f"{column} (weight {fmt(weight)}): n = {st.n}"
        if st.unit:
            lines.append(f"{head}; singleton=verl: mean 0, std 1")
        elif st.mean is None:
            lines.append(f"{head}; no valid value: z null")
        elif st.constant:
            lines.append(f"{head}, mean = {fmt(st.mean)}; every value equal: z = 0")
        elif st.var is None:
            lines.append(f"{head}, mean = {fmt(st.mean)}; std (ddof={ddof}) undefined: z null")
        else:
            lines.append(
                f"{head}, mean = {fmt(st.mean)}, std (ddof={ddof}) = {fmt(math.sqrt(st.var))}"
            )
    xs = [x for x, _ in gdpo.batch]
    flat = len(xs) <= ddof or max(xs) == min(xs)
    mean_b, var_b = (0.0, 0.0) if flat else _weightedmean_var(gdpo.batch, ddof)
    weighting = " token-weighted" if options.token_weighted else ""
    if flat:
        lines.append(f"every value of s in the batch ({len(xs)}) is equal: every advantage is 0")
    else:
        lines.append(
            f"s whitened over the batch's {len(xs)} values of s{weighting}: mean_b = "
            f"{fmt(mean_b)}, var_b (ddof={ddof}) = {fmt(var_b)}"
        )
    shaped = options.clip if options.clip_stage == "shaped" else None
    formulas: list[tuple[str, float | None]] = []
    for i, s in enumerate(sums):
        if s is None:
            formulas.append(("-", None))
            continue
        terms = [
            f"{fmt(w)} x {fmt(z[i])}"
            for w, z in zip(gdpo.weights, zs, strict=True)
            if z[i] is not None
        ]
        text = f"s = {' + '.join(terms) or '0'} = {fmt(s)}"
        x = s
        if shaped is not None:
            x = min(max(s, shaped[0]), shaped[1])
            text += f", clipped: {fmt(x)}"
        if flat:
            formulas.append((f"{text}; every s of the batch is equal", 0.0))
            continue
        norm, denominator = norm_filled(options, var_b)
        formulas.append(
            (f"{text}; ({fmt(x)} - {fmt(mean_b)}) / {norm}", (x - mean_b) / denominator)
        )
    return tuple(lines), formulas


def gdpo_formula(options: AdvantageOptions) -> str:
    """GDPO's formula in symbols, with the eps placement of ``eps_mode``."""
    spread, batch = spread_symbol(options), spread_symbol(options, "_b")
    return f"z_k = (r_k - mean_k) / {spread}; s = sum_k w_k z_k; A = (s - mean_b) / {batch}"


def _fill_in(
    group_rows: pl.DataFrame,
    batch: pl.DataFrame | None,
    group_keys: tuple[str, ...],
    options: AdvantageOptions,
    estimator: Estimator,
) -> FilledIn:
    """The estimator's formula filled in for ``group_rows`` (see
    :mod:`grpo_cli.report.explain_context`), evaluated over ``batch`` (the rows of its
    batch) when given, else over the group."""
    rows = group_rows if batch is None else batch
    if batch is None:
        shown = list(range(group_rows.height))
        groups = [0] * group_rows.height
    else:
        where = {row: i for i, row in enumerate(batch[ROW_KEY].to_list())}
        shown = [where[row] for row in group_rows[ROW_KEY].to_list()]
        keys = [c for c in group_keys if c in batch.columns] or [ROW_KEY]
        ids: dict[tuple[Any, ...], int] = {}
        groups = [ids.setdefault(k, len(ids)) for k in batch.select(keys).iter_rows()]
    lengths = None
    if options.length_col and options.length_col in rows.columns:
        lengths = [_float(v) for v in rows[options.length_col].to_list()]
    rewards = [_float(v) for v in rows[REWARD_KEY].to_list()]
    return fill_in(estimator, options, rewards, groups, shown, lengths)


def _policy(r: float | None, n: int, constant: bool, options: AdvantageOptions) -> Message | None:
    """The rule that sets this row's advantage instead of the formula, if any."""
    if r is None:
        if options.nulls == "zero":
            return (
                "null reward: left out of the statistics; advantage 0 ("
                + option("nulls", "zero")
                + ")"
            )
        return (
            "null reward: left out of the statistics; advantage null ("
            + option("nulls", "exclude")
            + ")"
        )
    if n == 1 and options.singleton in ("zero", "raw", "null"):
        value = {"zero": "0", "raw": "the raw reward", "null": "null"}[options.singleton]
        return (
            f"only valid reward of its group: advantage {value} ("
            + option("singleton", options.singleton)
            + ")"
        )
    if constant:
        return "zero-variance group: advantage exactly 0"
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
    """Explain one group of the log in ``inputs`` (what ``grpo-adv explain`` runs): the
    choice of group checked before any input is read (:func:`check_choice`), the log read,
    then :func:`explain_one`.

    Args:
        inputs: the log's files, folders or globs; empty: standard input when it is a pipe
            or a file.
        key, row, pick: which group (exactly one; see :func:`explain_one`).
        preset, options: the computation's preset and options (the CLI's keywords,
            ``advantage_col`` included: its logged values are shown beside, one per
            response (:func:`grpo_cli.core.layouts.per_response`); None or absent:
            ``advantage``, else verl's ``advantages``).
        input_format: the inputs' format when the suffixes do not say.
    """
    from grpo_cli.jobs.outputs import read_input, sources_or_stdin

    check_choice(key, row, pick)  # before any input is read
    explicit = dict(options or {})
    key_cols = tuple(explicit.get("group_cols", DEFAULT_GROUP_COLS))
    log = read_input(sources_or_stdin([str(s) for s in inputs]), input_format, key_cols)
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
    """Compute the log as ``compute`` would (preset, layout, options), then explain one
    group: the one whose key reads ``key``, the one of input row ``row`` (from 0), or the
    one ``pick`` names (exactly one of the three; see the module docstring).

    ``key`` gives one value per group column (see :func:`parse_key`), or the start of one
    group's key values. Positional groups (``group_size``) are keyed ``BATCH,GROUP_INDEX``
    (``step,group_index`` for a TRL log): GROUP_INDEX counts the runs of group_size rows
    within the batch value from 0; without a batch column, the key is GROUP_INDEX alone. A
    verl dump's uid-derived key column (the uid without its session and index parts) is
    named ``uid``. ``backend`` and ``device`` are ignored: explain computes with Polars.
    """
    from grpo_cli.core.columns import logged_advantage
    from grpo_cli.core.layouts import per_response
    from grpo_cli.core.resolve import derive, make_request, resolve
    from grpo_cli.core.run_summary import check_batch_spans
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
    full = full.with_row_index(ROW_KEY)  # the engines keep the input's row order
    names = tuple(SHOWN_NAMES.get(c, c) for c in keys.exact)
    chosen: Message | None = None
    if texts:
        rows = select_group(full, keys.exact, texts, names)
        if not _named_exactly(rows, keys.exact, texts, names):
            chosen = (
                option("group", Verbatim(_given(texts)))
                + ": the only group whose key starts that way"
            )
    elif row is not None:
        rows = _group_at(full, keys.exact, _row_of(full, row))
        chosen = option("row", row) + f": the group of input row {row}"
    else:
        assert pick is not None
        position = pick_row(full, keys.exact, pick, options.advantage_col)
        rows = _group_at(full, keys.exact, position)
        chosen = _picked(pick, full.row(position, named=True), options.advantage_col)
    batch = None
    if plan.estimator.scope == "batch":
        batch = _batch_members(full, rows, keys.batch)
    gdpo = None
    if options.aggregation == "normalize_then_sum":
        gdpo = _gdpo_view(full, rows, keys, options)
    logged = rows[LOGGED_KEY].cast(pl.Float64, strict=False) if has_logged else None
    shown = {name: rows[c][0] for c, name in zip(keys.exact, names, strict=True)}
    explained = explain_group(
        rows, options, plan.estimator, batch, logged, shown, gdpo, chosen, group_keys=keys.exact
    )
    return replace(explained, warnings=(*plan.notes, *([tokens] if tokens else [])))


def _picked(pick: str, first: dict[str, Any], advantage_col: str) -> Message:
    """How ``pick`` found the group, ``first`` being the row it found."""
    named = option("pick", pick)
    if pick == "worst":
        return named + (
            f": input row {first[ROW_KEY]} has the largest |advantage| of the "
            f"log ({fmt(first[advantage_col])})"
        )
    if pick == "singleton":
        return named + ": the first group with exactly one valid reward"
    return named + ": the first group whose valid rewards (two or more) are equal"


def _batch_members(
    full: pl.DataFrame, rows: pl.DataFrame, batch_cols: tuple[str, ...]
) -> pl.DataFrame:
    """The rows of ``full`` in the batch of ``rows``, in order."""
    first = rows.row(0, named=True)
    return full.filter(pl.all_horizontal(pl.col(c) == first[c] for c in batch_cols))


def _gdpo_view(
    full: pl.DataFrame, rows: pl.DataFrame, keys: Keys, options: AdvantageOptions
) -> GdpoView:
    """Each reward column's values in the group, and ``s`` over the group's batch."""
    members = _batch_members(full, rows, keys.batch)
    columns = options.reward_cols

    def values(frame: pl.DataFrame) -> tuple[list[float | None], ...]:
        read = frame.select(
            reward_expr(c, options.nulls).alias(f"r{i}") for i, c in enumerate(columns)
        )
        return tuple([_float(v) for v in read.to_series(i).to_list()] for i in range(len(columns)))

    batch_values = values(members)
    where: dict[tuple[Any, ...], list[int]] = {}
    for i, group in enumerate(members.select(list(keys.exact)).iter_rows()):
        where.setdefault(group, []).append(i)
    sums: list[float | None] = [None] * members.height
    for indices in where.values():
        part = tuple([column[i] for i in indices] for column in batch_values)
        for i, s in zip(indices, gdpo_sums(part, options)[0], strict=True):
            sums[i] = s
    if options.token_weighted and options.length_col is not None:
        weights = [_float(w) for w in members[options.length_col].to_list()]
    else:
        weights = [1.0] * members.height
    shaped = options.clip if options.clip is not None and options.clip_stage == "shaped" else None
    batch = [
        (min(max(s, shaped[0]), shaped[1]) if shaped else s, w)
        for s, w in zip(sums, weights, strict=True)
        if s is not None and w is not None
    ]
    return GdpoView(columns, options.weights, values(rows), batch)

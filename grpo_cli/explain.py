"""``explain``: one group's advantages with every number of the formula filled in, the way
the reference lessons teach it (no Rich here; :mod:`grpo_cli.render` draws it).

The statistics are recomputed here in plain Python floats, from the group's valid rewards:

    n = number of valid rewards, mean = sum(r) / n,
    var = sum((r - mean)^2) / (n - ddof), std = sqrt(var)

and each response's advantage is written out with the estimator's formula. The value shown
as the advantage is the one ``compute`` writes (the same pipeline), so a test can check the
filled-in arithmetic against it. Policies that override the formula (null reward, one-reward
group, zero-variance group, clip) are stated per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from grpo_cli.compute import REWARD_KEY
from grpo_cli.errors import InputError
from grpo_cli.options import AdvantageOptions

FILLED: Final = (
    "grpo",
    "dr_grpo",
    "rloo",
    "batch_std",
    "gpg",
    "opo",
    "grpo_passk",
    "reinforce_pp_baseline",
)
SHOWN_KEYS: Final = 8


@dataclass(frozen=True)
class ExplainedRow:
    """One response: its reward, the formula with numbers, the advantage ``compute`` gives,
    and the policy that decided it instead of the formula (if any)."""

    reward: float | None
    formula: str
    value: float | None  # the formula's value, recomputed here
    advantage: float | None  # the pipeline's
    policy: str | None
    logged: float | None = None  # the input's own advantage column, if it had one


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


def parse_key(text: str, group_cols: tuple[str, ...]) -> tuple[str, ...]:
    """``KEY`` as one value per group column (comma-separated for a composite key)."""
    parts = tuple(p.strip() for p in text.split(",")) if len(group_cols) > 1 else (text,)
    if len(parts) != len(group_cols):
        raise InputError(
            f"--group {text!r} gives {len(parts)} value(s) for {len(group_cols)} group columns",
            hint=f"give one value per column, comma-separated: {','.join(group_cols).upper()}",
        )
    return parts


def select_group(full: pl.DataFrame, group_cols: tuple[str, ...], text: str) -> pl.DataFrame:
    """The rows of the group whose key reads ``text``; an error lists a few existing keys."""
    values = parse_key(text, group_cols)
    match = pl.all_horizontal(
        pl.col(c).cast(pl.String) == v for c, v in zip(group_cols, values, strict=True)
    )
    rows = full.filter(match)
    if rows.height == 0:
        keys = (
            full.select(
                pl.concat_str([pl.col(c).cast(pl.String) for c in group_cols], separator=",")
            )
            .to_series()
            .unique(maintain_order=True)
        )
        shown = ", ".join(keys.head(SHOWN_KEYS).to_list())
        more = f" (and {keys.len() - SHOWN_KEYS} more)" if keys.len() > SHOWN_KEYS else ""
        raise InputError(
            f"no group {text!r} in {', '.join(group_cols)}",
            hint=f"existing keys: {shown}{more}",
        )
    return rows


def explain_group(
    group_rows: pl.DataFrame,
    options: AdvantageOptions,
    estimator_summary: str,
    batch: BatchView | None = None,
    logged: pl.Series | None = None,
) -> Explanation:
    """Explain ``group_rows`` (one group, with REWARD_KEY and the advantage column);
    ``logged``: the advantages the input carried for these rows, shown beside ours."""
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
    std = math.sqrt(var) if var is not None else None
    steps = _steps(valid, n, mean, var, std, ddof)
    notes: list[str] = []
    g_mean, g_var = mean, var
    if options.singleton == "verl" and n == 1:
        g_mean, g_var = 0.0, 1.0
        notes.append("singleton=verl: a one-reward group has mean 0 and std 1")
    extras = _Extras()
    lengths = None
    if options.length_col and options.length_col in group_rows.columns:
        lengths = [_float(v) for v in group_rows[options.length_col].to_list()]
    more = _estimator_steps(options, extras, batch, valid, rewards, lengths, n, g_var)
    steps += more
    constant = n >= 2 and max(valid) == min(valid)
    if constant:
        notes.append("every valid reward is equal: zero variance, every advantage is exactly 0")
    rows = []
    for reward, advantage, was in zip(rewards, advantages, logged_values, strict=True):
        formula, value = _formula(reward, options, n, g_mean, g_var, extras, valid)
        policy = _policy(reward, n, constant, options)
        if policy is None and value is not None and options.clip is not None:
            lo, hi = options.clip
            if value < lo or value > hi:
                policy = f"clipped to [{_fmt(lo)}, {_fmt(hi)}]"
        rows.append(ExplainedRow(reward, formula, value, advantage, policy, was))
    key = {c: group_rows[c][0] for c in options.group_cols if c in group_rows.columns}
    return Explanation(
        key=key,
        options=options,
        estimator_summary=estimator_summary,
        formula=general_formula(options),
        size=group_rows.height,
        n=n,
        mean=mean,
        var=var,
        std=std,
        steps=steps,
        rows=tuple(rows),
        notes=tuple(notes),
        logged=logged is not None,
    )


def _float(value: Any) -> float | None:
    if value is None:
        return None
    f = float(value)
    return None if math.isnan(f) else f


def _fmt(x: float | None) -> str:
    """Six significant digits, the way the lessons print them."""
    if x is None:
        return "null"
    return f"{x:.6g}"


def _steps(
    valid: list[float], n: int, mean: float | None, var: float | None, std: float | None, ddof: int
) -> tuple[str, ...]:
    if n == 0:
        return ("no valid reward in this group",)
    shown = " + ".join(_fmt(r) for r in valid) if n <= 16 else f"... ({n} values)"
    lines = [f"n = {n} valid rewards", f"mean = ({shown}) / {n} = {_fmt(mean)}"]
    if var is None:
        lines.append(f"std (ddof={ddof}) is undefined with n = {n}")
    else:
        squares = (
            " + ".join(f"({_fmt(r)} - {_fmt(mean)})^2" for r in valid)
            if n <= 4
            else f"sum of (r - {_fmt(mean)})^2"
        )
        total = math.fsum((r - mean) ** 2 for r in valid) if mean is not None else 0.0
        lines.append(
            f"var (ddof={ddof}) = ({squares}) / ({n} - {ddof}) = {_fmt(total)} / {n - ddof} "
            f"= {_fmt(var)}"
        )
        lines.append(f"std = sqrt(var) = {_fmt(std)}")
    return tuple(lines)


@dataclass(frozen=True)
class BatchView:
    """What batch-level estimators need of the group's batch: its valid rewards, and for
    the whitening estimators the group-centred values ``x`` of all its responses."""

    rewards: list[float]
    centred: list[float]


@dataclass
class _Extras:
    """Per-estimator numbers shared by every row of the group."""

    b_var: float | None = None
    alpha: float | None = None
    baseline: float | None = None
    best: float | None = None
    n_best: int = 0
    second: float | None = None
    whiten: tuple[float, float] | None = None  # batch mean and variance of x
    flat_batch: bool = False


def _mean_var(values: list[float], ddof: int) -> tuple[float, float | None]:
    m = math.fsum(values) / len(values)
    if len(values) <= ddof:
        return m, None
    return m, math.fsum((v - m) ** 2 for v in values) / (len(values) - ddof)


def _estimator_steps(
    options: AdvantageOptions,
    extras: _Extras,
    batch: BatchView | None,
    valid: list[float],
    rewards: list[float | None],
    lengths: list[float | None] | None,
    n: int,
    g_var: float | None,
) -> tuple[str, ...]:
    """Fill ``extras`` for the estimator; the lines that state those numbers."""
    est, ddof = options.estimator, options.ddof
    if est == "batch_std" and batch is not None and batch.rewards:
        _, extras.b_var = _mean_var(batch.rewards, ddof)
        if extras.b_var is not None:
            return (
                f"batch std (ddof={ddof}) over the batch's {len(batch.rewards)} valid rewards"
                f" = {_fmt(math.sqrt(extras.b_var))}",
            )
    if est == "gpg" and batch is not None:
        size = len(batch.rewards)
        nonzero = sum(1 for v in batch.rewards if v != 0)
        extras.alpha = size / max(nonzero, 1)
        return (
            f"alpha = batch valid rewards / max(non-zero rewards, 1) = {size} / "
            f"{max(nonzero, 1)} = {_fmt(extras.alpha)}",
        )
    if est == "opo" and lengths is not None and n:
        pairs = [(r, w) for r, w in zip(rewards, lengths, strict=True) if r is not None]
        weighted = math.fsum(r * (w or 0.0) for r, w in pairs)
        total = math.fsum(w or 0.0 for _, w in pairs)
        extras.baseline = 0.0 if options.singleton == "verl" and n == 1 else weighted / total
        return (
            f"baseline = sum(L r) / sum(L) = {_fmt(weighted)} / {_fmt(total)} = "
            f"{_fmt(extras.baseline)}  (L: {options.length_col})",
        )
    if est == "grpo_passk" and n:
        extras.best = max(valid)
        extras.n_best = sum(1 for v in valid if v == extras.best)
        below = [v for v in valid if v < extras.best]
        extras.second = max(below) if below else None
        return (
            f"best = {_fmt(extras.best)} ({extras.n_best} response(s)), second best = "
            f"{_fmt(extras.second)}",
        )
    if est == "reinforce_pp_baseline" and batch is not None and not options.token_weighted:
        xs = batch.centred
        if options.clip is not None and options.clip_stage == "shaped":
            xs = [min(max(x, options.clip[0]), options.clip[1]) for x in xs]
        if not xs:
            return ()
        mean_b, var_b = _mean_var(xs, ddof)
        extras.flat_batch = var_b is None or max(xs) == min(xs)
        extras.whiten = (mean_b, var_b or 0.0)
        return (
            f"x = r - mean, then whitened over the batch's {len(xs)} values of x: "
            f"mean_b = {_fmt(mean_b)}, var_b (ddof={ddof}) = {_fmt(var_b)}",
        )
    return ()


def _norm_text(options: AdvantageOptions, var: float) -> tuple[str, float]:
    """The denominator: its text with numbers, and its value (per eps_mode)."""
    eps = options.eps
    if options.eps_mode == "std":
        return f"({_fmt(math.sqrt(var))} + {eps:g})", math.sqrt(var) + eps
    if options.eps_mode == "var":
        return f"sqrt({_fmt(var)} + {eps:g})", math.sqrt(var + eps)
    return f"sqrt(max({_fmt(var)}, {eps:g}))", math.sqrt(max(var, eps))


def _formula(
    r: float | None,
    options: AdvantageOptions,
    n: int,
    g_mean: float | None,
    g_var: float | None,
    extras: _Extras,
    valid: list[float],
) -> tuple[str, float | None]:
    """The estimator's formula for reward ``r`` with the numbers filled in, and its value."""
    if r is None or g_mean is None:
        return "-", None
    est = options.estimator
    centred = f"{_fmt(r)} - {_fmt(g_mean)}"
    if est == "dr_grpo":
        return centred, r - g_mean
    if est == "rloo":
        if n < 2:
            return f"{centred}  (no other response: r - mean)", r - g_mean
        total = math.fsum(valid)
        return f"{_fmt(r)} - ({_fmt(total)} - {_fmt(r)}) / {n - 1}", r - (total - r) / (n - 1)
    if est in ("grpo", "batch_std"):
        var = extras.b_var if est == "batch_std" else g_var
        if var is None:
            return f"({centred}) / undefined std", None
        text, denominator = _norm_text(options, var)
        return f"({centred}) / {text}", (r - g_mean) / denominator
    if est == "gpg" and extras.alpha is not None:
        return f"{_fmt(extras.alpha)} x ({centred})", extras.alpha * (r - g_mean)
    if est == "opo" and extras.baseline is not None:
        return f"{_fmt(r)} - {_fmt(extras.baseline)}", r - extras.baseline
    if est == "grpo_passk" and extras.best is not None:
        if r != extras.best or extras.n_best != 1:
            return "not the group's unique best", 0.0
        if extras.second is None or g_var is None:
            return "no second best: undefined", None
        text, denominator = _norm_text(options, g_var)
        return (
            f"({_fmt(extras.best)} - {_fmt(extras.second)}) / {text}",
            (extras.best - extras.second) / denominator,
        )
    if est == "reinforce_pp_baseline" and extras.whiten is not None:
        x = 0.0 if n >= 2 and max(valid) == min(valid) else r - g_mean
        if options.clip is not None and options.clip_stage == "shaped":
            x = min(max(x, options.clip[0]), options.clip[1])
        if extras.flat_batch:
            return f"x = {_fmt(x)}; every x of the batch is equal", 0.0
        mean_b, var_b = extras.whiten
        text, denominator = _norm_text(options, var_b)
        return f"({_fmt(x)} - {_fmt(mean_b)}) / {text}", (x - mean_b) / denominator
    if options.token_weighted:
        return "(length-weighted batch statistics: not written out)", None
    return "(not written out for this estimator)", None


def general_formula(options: AdvantageOptions) -> str:
    """The estimator's formula in symbols, with the eps placement of ``eps_mode``."""
    spread = {
        "std": "(std + eps)",
        "var": "sqrt(var + eps)",
        "var_floor": "sqrt(max(var, eps))",
    }[options.eps_mode]
    batch = spread.replace("std", "std_batch").replace("var", "var_batch")
    return {
        "grpo": f"A = (r - mean) / {spread}",
        "batch_std": f"A = (r - mean) / {batch}",
        "dr_grpo": "A = r - mean",
        "rloo": "A = r - (sum - r) / (n - 1)",
        "gpg": "A = alpha (r - mean)",
        "opo": "A = r - sum(L r) / sum(L)",
        "grpo_passk": f"A = (best - second best) / {spread} for the unique best, else 0",
        "reinforce_pp_baseline": f"x = r - mean; A = (x - mean_b) / {batch}",
    }.get(options.estimator, "")


def _policy(r: float | None, n: int, constant: bool, options: AdvantageOptions) -> str | None:
    """The rule that sets this row's advantage instead of the formula, if any."""
    if r is None:
        if options.nulls == "zero":
            return "null reward: left out of the statistics; advantage 0 (--nulls zero)"
        return "null reward: left out of the statistics; advantage null (--nulls exclude)"
    if n == 1 and options.singleton in ("zero", "raw", "null"):
        value = {"zero": "0", "raw": "the raw reward", "null": "null"}[options.singleton]
        return (
            f"only valid reward of its group: advantage {value} (--singleton {options.singleton})"
        )
    if constant:
        return "zero-variance group: advantage exactly 0"
    return None


def explain_one(
    frame: pl.DataFrame, preset: str | None, explicit: dict[str, Any], key: str
) -> Explanation:
    """Compute the log as ``compute`` would (preset, layout, options), then explain the
    group whose key reads ``key``."""
    from grpo_cli.estimators import get_estimator
    from grpo_cli.pipeline import annotate

    column = explicit.get("advantage_col", "advantage")
    logged_column = "__grpo_logged_advantage"
    has_logged = column in frame.columns
    if has_logged:  # an annotated log: recompute, and show the logged values beside
        frame = frame.rename({column: logged_column})
    result = annotate(frame, preset, **explicit)
    options = result.options
    if options.group_size is not None or not get_estimator(options.estimator).uses_groups:
        raise InputError(
            f"explain needs groups named by a key column; {options.estimator} with "
            f"--group-size {options.group_size} has none",
            hint="give --group-col COL and a group estimator",
        )
    if options.estimator == "process":
        raise InputError("explain does not cover process supervision", hint="use compute")
    rows = select_group(result.full, options.group_cols, key)
    batch = None
    if options.estimator in ("batch_std", "gpg", "reinforce_pp_baseline"):
        batch = _batch_view(result.full, rows, result.keys.batch, options)
    summary = get_estimator(options.estimator).summary
    logged = rows[logged_column].cast(pl.Float64) if has_logged else None
    return explain_group(rows, options, summary, batch, logged)


def _batch_view(
    full: pl.DataFrame, rows: pl.DataFrame, batch_cols: tuple[str, ...], options: AdvantageOptions
) -> BatchView:
    """The valid rewards of the group's batch, and their group-centred values ``x``
    (0 in a zero-variance group; a one-reward group's mean is 0 under singleton=verl)."""
    from grpo_cli.compute import CONSTANT_KEY, VALID_KEY
    from grpo_cli.estimators import STAT_COLUMNS

    first = rows.select(list(batch_cols)).head(1)
    members = full.join(first, on=list(batch_cols), how="semi").filter(
        pl.col(REWARD_KEY).is_not_null()
    )
    mean = pl.col(STAT_COLUMNS["mean"])
    if options.singleton == "verl":
        mean = pl.when(pl.col(VALID_KEY) == 1).then(0.0).otherwise(mean)
    x = pl.when(pl.col(CONSTANT_KEY)).then(0.0).otherwise(pl.col(REWARD_KEY) - mean)
    return BatchView(
        rewards=members[REWARD_KEY].to_list(),
        centred=members.select(x).to_series().to_list(),
    )

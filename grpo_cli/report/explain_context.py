"""The filled-in arithmetic of ``explain``: the estimator's own formula
(:func:`grpo_cli.core.policies.formula`, stated once in :mod:`grpo_cli.core.estimators`)
evaluated by :class:`ExplainContext` over one batch in plain Python floats. Each value is a
:class:`Term`, its numbers (None: null) and the operation that made it, rendered in symbols
(``(r - mean) / (std + eps)``: the formula line) or with one row's numbers
(``(1 - 0.5) / (0.57735 + 1e-08)``: that response's line).

A named statistic (``mean``, ``var``, ``n``, ``sum``, ``mean_b``, ...), a value the formula
names (GPG's ``alpha``) and any part made of group or batch numbers alone show as their
number, unless eps or a named value is part of it (``n - 1`` shows ``3``, ``sqrt(var) +
eps`` stays ``0.57735 + 1e-08``); ``sqrt`` of a variance is its std. A choice (``where``)
shows the branch taken (in symbols: the general one); the zero-variance rule shows the
formula it overrides. Named values and batch statistics add lines to the steps
(``alpha = n_b / max(nonzero_b, 1) = 8 / 4 = 2``).

Arithmetic follows the engines': null propagates and is left out of every statistic, a
division by zero gives inf or NaN, and a group's variance is exactly 0 when its valid
rewards are all equal.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from grpo_cli.core.estimators import FormulaContext, Value
from grpo_cli.core.policies import final_clip, formula, overrides

if TYPE_CHECKING:
    from grpo_cli.core.estimators import Estimator
    from grpo_cli.core.options import AdvantageOptions

Number = float | bool | None


def fmt(x: float | None) -> str:
    """Six significant digits, the way the lessons print them."""
    return "null" if x is None else f"{x:.6g}"


def signed_sum(values: list[float]) -> str:
    """Non-empty ``values`` written as a sum, a negative term with its minus sign as the
    operator: ``[1, -1.5, 2]`` -> ``1 - 1.5 + 2`` (never ``1 + -1.5``)."""
    terms = (f"- {fmt(-x)}" if math.copysign(1.0, x) < 0 else f"+ {fmt(x)}" for x in values[1:])
    return " ".join([fmt(values[0]), *terms])


def mean_var(values: list[float], ddof: int) -> tuple[float, float | None]:
    """Mean and variance with ``ddof`` (None with too few values) of non-empty ``values``;
    exactly the value and 0 when every value is equal (as the engines give)."""
    if max(values) == min(values):
        return values[0], (0.0 if len(values) > ddof else None)
    m = math.fsum(values) / len(values)
    if len(values) <= ddof:
        return m, None
    return m, math.fsum((v - m) ** 2 for v in values) / (len(values) - ddof)


# --------------------------------------------------------------------------- arithmetic


def _div(a: float, b: float) -> float:
    """IEEE division, as the engines': x / 0 is inf (or NaN for 0 / 0)."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


# Binding strength of each operation, for parentheses.
_TIERS = (
    ("or",),
    ("and",),
    ("not",),
    ("==", "!=", "<", "<=", ">", ">="),
    ("+", "-"),
    ("*", "/"),
    ("**",),
)
_PRECEDENCE = {op: strength for strength, ops in enumerate(_TIERS, start=1) for op in ops}
_SHOWN_OP = {"==": "=", "*": "x"}
ATOM = 10


def _not(a: Number) -> Number:
    return None if a is None else not a


def _kleene_and(a: Number, b: Number) -> Number:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return bool(a) and bool(b)


def _kleene_or(a: Number, b: Number) -> Number:
    return _not(_kleene_and(_not(a), _not(b)))


def _operator(
    op: str, fn: Callable[[Any, Any], Any], *, swap: bool = False
) -> Callable[[Term, Any], Term]:
    """The method of :class:`Term` for ``op``: ``fn`` per row, null propagating (Kleene
    logic for ``and`` and ``or``); ``swap``: the reflected method (``other op self``)."""
    kleene = op in ("and", "or")

    def method(self: Term, other: Any) -> Term:
        other = _term(other, len(self.values))
        left, right = (other, self) if swap else (self, other)
        values = [
            fn(a, b) if kleene or (a is not None and b is not None) else None
            for a, b in zip(left.values, right.values, strict=True)
        ]
        return _made(values, op, (left, right))

    return method


@dataclass(eq=False)
class Term:
    """A value of a formula evaluated by :class:`ExplainContext`: its numbers, one per row
    (None: null), and how it was made, ``op`` over ``args``: ``leaf`` (a named input or
    statistic, ``symbol``), ``lit``, ``eps``, an operator, ``sqrt``, ``max``, ``clip``,
    ``where``, ``is_null``, ``fill_null``, ``named`` (a value the formula names) or
    ``shown`` (shown as ``args[0]``). ``varies``: differs between a group's rows;
    ``unfolded``: eps or a named value is part of it (never shown folded into its number)."""

    values: list[Number]
    op: str
    args: tuple[Any, ...] = ()
    symbol: str = ""
    varies: bool = False
    unfolded: bool = False

    __add__ = _operator("+", operator.add)
    __radd__ = _operator("+", operator.add, swap=True)
    __sub__ = _operator("-", operator.sub)
    __rsub__ = _operator("-", operator.sub, swap=True)
    __mul__ = _operator("*", operator.mul)
    __rmul__ = _operator("*", operator.mul, swap=True)
    __truediv__ = _operator("/", _div)
    __rtruediv__ = _operator("/", _div, swap=True)
    __pow__ = _operator("**", operator.pow)
    __eq__ = _operator("==", operator.eq)  # type: ignore[assignment]
    __ne__ = _operator("!=", operator.ne)  # type: ignore[assignment]
    __lt__ = _operator("<", operator.lt)
    __le__ = _operator("<=", operator.le)
    __gt__ = _operator(">", operator.gt)
    __ge__ = _operator(">=", operator.ge)
    __and__ = _operator("and", _kleene_and)
    __or__ = _operator("or", _kleene_or)
    __hash__ = None  # type: ignore[assignment]

    def __invert__(self) -> Term:
        return _made([_not(a) for a in self.values], "not", (self,))

    def sqrt(self) -> Term:
        """The square root; of a named variance, its std (``var`` -> ``std``)."""
        values = [None if a is None else math.sqrt(a) if a >= 0 else math.nan for a in self.values]
        if self.op == "leaf" and self.symbol.startswith("var"):
            return Term(values, "leaf", (), "std" + self.symbol[3:], self.varies, self.unfolded)
        return _made(values, "sqrt", (self,))

    def clip(self, lo: float, hi: float) -> Term:
        """Bounded to ``[lo, hi]``."""
        values = [None if a is None else min(max(float(a), lo), hi) for a in self.values]
        return _made(values, "clip", (self, _lit(lo, len(values)), _lit(hi, len(values))))


def _lit(value: float | None, n: int) -> Term:
    return Term([value] * n, "lit", (value,))


def _term(value: Any, n: int) -> Term:
    return value if isinstance(value, Term) else _lit(value, n)


def _made(values: Sequence[Number], op: str, args: tuple[Term, ...]) -> Term:
    return Term(
        list(values),
        op,
        args,
        varies=any(a.varies for a in args),
        unfolded=any(a.unfolded for a in args),
    )


def _leaf(values: list[Number], symbol: str, *, varies: bool = False) -> Term:
    return Term(values, "leaf", (), symbol, varies=varies)


# --------------------------------------------------------------------------- rendering


def render(term: Term, row: int | None) -> str:
    """``term`` in symbols (``row`` None) or with row ``row``'s numbers (see the module
    docstring)."""
    text, _ = _render(term, row)
    return text


def _render(term: Term, row: int | None) -> tuple[str, int]:
    """The text and its binding strength."""
    op = term.op
    if op == "lit":
        return fmt(term.args[0]), ATOM
    if op == "eps":
        return (f"{term.args[0]:g}" if row is not None else "eps"), ATOM
    if op in ("leaf", "named"):
        if row is None:
            return term.symbol, ATOM
        value = term.values[row]
        if value is None:
            return f"undefined {term.symbol}", ATOM
        return fmt(float(value)), ATOM
    if row is not None and not term.varies and not term.unfolded:
        value = term.values[row]
        return ("null" if value is None else fmt(float(value))), ATOM
    return _render_node(term, row)


def _render_node(term: Term, row: int | None) -> tuple[str, int]:
    """``term``'s operation over its arguments' texts (see :func:`_render`)."""
    op, args = term.op, term.args
    numeric = row is not None
    if op == "shown":
        return _render(args[0], row)
    if op == "where":
        return _render_where(term, row)
    if op == "fill_null":
        x, value = args
        if numeric and x.values[row] is None:
            return fmt(value), ATOM
        return _render(x, row)
    if op == "is_null":
        return f"{_wrap(args[0], row, ATOM)} is null", _PRECEDENCE["=="]
    if op == "not" and args[0].op == "is_null":
        return f"{_wrap(args[0].args[0], row, ATOM)} is not null", _PRECEDENCE["=="]
    if op == "not":
        return f"not {_wrap(args[0], row, _PRECEDENCE['not'])}", _PRECEDENCE["not"]
    if op in ("sqrt", "max", "clip"):
        inner = ", ".join(render(a, row) for a in args)
        return f"{op}({inner})", ATOM
    strength = _PRECEDENCE[op]
    left, right = args
    if op == "*" and not numeric and left.op != "lit" and right.op != "lit":
        # symbols side by side: ``L r``, ``alpha (r - mean)``
        return f"{_wrap(left, row, strength)} {_wrap(right, row, strength)}", strength
    # a right operand of - or / binds tighter than the operator (a - (b - c), a / (b x c))
    right_strength = strength + 1 if op in ("-", "/", "**") else strength
    shown = _SHOWN_OP.get(op, op)
    return f"{_wrap(left, row, strength)} {shown} {_wrap(right, row, right_strength)}", strength


def _wrap(term: Term, row: int | None, at_least: int) -> str:
    text, strength = _render(term, row)
    return text if strength >= at_least else f"({text})"


def _render_where(term: Term, row: int | None) -> tuple[str, int]:
    """A choice: with numbers, the branch taken (a constant taken against the general
    branch says why); in symbols, the general branch."""
    cond, then, otherwise = term.args
    if row is None:
        if cond.op == "not" and cond.args[0].op == "is_null":
            return _render(then, row)  # a validity mask
        if otherwise.op == "lit" and otherwise.args[0] is None and then.op != "lit":
            return f"{_wrap(then, row, ATOM)} if {render(cond, row)}", 0
        if then.op == otherwise.op == "lit":
            return f"[{render(cond, row)}]", ATOM
        return _render(then if otherwise.op == "lit" else otherwise, row)
    taken, general = (then, otherwise) if cond.values[row] else (otherwise, then)
    if taken.op == "lit" and general.op != "lit":
        why = render(cond, None) if cond.values[row] else f"not {_wrap(cond, None, ATOM)}"
        return f"{render(taken, row)}  ({why})", 0
    return _render(taken, row)


# --------------------------------------------------------------------------- the context


@dataclass
class ExplainContext(FormulaContext):
    """The formula context of ``explain``: every value a :class:`Term` over the rows of
    one batch (or of one group, for an estimator that reads no batch statistic). Beyond
    :class:`FormulaContext`'s attributes: ``groups``, each row's group (an index);
    ``steps``, the lines named values add; ``row_named``, the named values that differ per
    row (written in the formula line)."""

    reward: Term
    groups: list[int]
    ddof: int
    eps: float
    eps_mode: str
    singleton_unit: bool = False
    length: Term | None = None
    token_weighted: bool = False
    baseline: Term | None = None
    shaped_clip: tuple[float, float] | None = None
    steps: list[str] = field(default_factory=list)
    row_named: list[Term] = field(default_factory=list)
    _batch: dict[int, tuple[Term, dict[str, Term], int]] = field(default_factory=dict)

    def with_spread(self, ddof: int, eps: float, eps_mode: str) -> ExplainContext:
        """See :meth:`FormulaContext.with_spread`: eps shown as eps (``eps_w``); the steps
        and batch lines shared."""
        shown = Term([eps] * self.size, "eps", (eps,), unfolded=True)
        return replace(self, ddof=ddof, eps=shown, eps_mode=eps_mode)  # type: ignore[arg-type]

    @property
    def size(self) -> int:
        """The number of rows evaluated."""
        return len(self.groups)

    # ------------------------------------------------ the primitives of FormulaContext
    def where(
        self, cond: Value, then: Value | float | None, otherwise: Value | float | None = None
    ) -> Term:
        n = self.size
        c, a, b = _term(cond, n), _term(then, n), _term(otherwise, n)
        values = [x if k else y for k, x, y in zip(c.values, a.values, b.values, strict=True)]
        return _made(values, "where", (c, a, b))

    def is_null(self, x: Value) -> Term:
        return _made([v is None for v in x.values], "is_null", (x,))

    def fill_null(self, x: Value, value: float) -> Term:
        values = [value if v is None else v for v in x.values]
        term = _made(values, "fill_null", (x,))
        term.args = (x, value)
        return term

    def maximum(self, x: Value, floor: float) -> Term:
        f = _term(floor, self.size)
        values = [
            lo if v is None else max(float(v), float(lo))
            for v, lo in zip(x.values, f.values, strict=True)
            if lo is not None
        ]
        return _made(values, "max", (x, f))

    def to_float(self, x: Value) -> Term:
        """See :meth:`FormulaContext.to_float`: the same term."""
        return x  # type: ignore[no-any-return]

    def _per_group(self, x: Term) -> dict[int, list[float]]:
        by: dict[int, list[float]] = {}
        for g, v in zip(self.groups, x.values, strict=True):
            if v is not None:
                by.setdefault(g, []).append(float(v))
        return by

    def reward_stat(self, name: str) -> Term:
        """See :meth:`FormulaContext.reward_stat` (exactly the reward and 0 when the valid
        rewards are all equal)."""
        stats: dict[int, Number] = {}
        for g, values in self._per_group(self.reward).items():
            mean, var = mean_var(values, self.ddof)
            stats[g] = {"count": float(len(values)), "mean": mean, "var": var}[name]
        default = 0.0 if name == "count" else None
        symbol = {"count": "n", "mean": "mean", "var": "var"}[name]
        return _leaf([stats.get(g, default) for g in self.groups], symbol)

    def group_agg(self, x: Value, op: str) -> Term:
        """See :meth:`FormulaContext.group_agg`: a named statistic (``sum`` of the reward,
        ``sum(L r)``, ``max(r)``)."""
        by = self._per_group(x)
        values = [_aggregate(by.get(g, []), op) for g in self.groups]
        symbol = "sum" if x is self.reward and op == "sum" else f"{op}({render(x, None)})"
        return _leaf(values, symbol)

    def batch_agg(self, x: Value, op: str) -> Term:
        """See :meth:`FormulaContext.batch_agg`: over every row evaluated (one batch)."""
        valid = [float(v) for v in x.values if v is not None]
        return _leaf([_aggregate(valid, op)] * self.size, f"{op}_b")

    # ---------------------------------------------------------------- named values
    def named(self, symbol: str, value: Value) -> Term:
        """``value`` shown as ``symbol``; a line of the steps states it (one per group
        value), or the formula line when it differs per row."""
        term = Term(value.values, "named", (value,), symbol, value.varies, unfolded=True)
        if term.varies:
            self.row_named.append(term)
        else:
            self.steps.append(_definition(term))
        return term

    def zero_if_constant(self, value: Value) -> Value:
        """See :meth:`FormulaContext.zero_if_constant`: 0 in a zero-variance group, shown
        as the formula it overrides (explain states the rule beside)."""
        chosen = super().zero_if_constant(value)
        return Term(chosen.values, "shown", (value,), "", value.varies, value.unfolded)

    def batch_stat(self, x: Value, name: str) -> Term:
        """See :meth:`FormulaContext.batch_stat` (its definition, evaluated here), shown
        as ``mean_b``, ``var_b``, ...; a line of the steps states the batch statistics of
        each value asked about."""
        _, stats, _ = self._batch.setdefault(id(x), (x, {}, self.ddof))
        if name not in stats:
            value = super().batch_stat(x, name)
            symbol = {"count": "n", "nonzero": "nonzero"}.get(name, name) + "_b"
            stats[name] = _leaf(value.values, symbol)
        return stats[name]

    def batch_lines(self) -> list[str]:
        """One line per value whose batch statistics the formula read."""
        lines = []
        weighted = " (token-weighted)" if self.token_weighted and self.length is not None else ""
        for x, stats, ddof in self._batch.values():
            count = sum(1 for v in x.values if v is not None)
            parts = []
            for name, term in stats.items():
                label = f"{term.symbol} (ddof={ddof})" if name == "var" else term.symbol
                parts.append(f"{label} = {fmt(_first(term))}")
            lines.append(
                f"over the batch's {count} values of {render(x, None)}{weighted}: "
                + ", ".join(parts)
            )
        return lines


def _aggregate(values: list[float], op: str) -> Number:
    """``op`` (``sum``, ``count``, ``nonzero``, ``max``, ``min``) of ``values``: 0 or null
    (``max``, ``min``) when there are none."""
    if op in ("max", "min"):
        return (max if op == "max" else min)(values) if values else None
    if op == "nonzero":
        return float(sum(1 for v in values if v != 0))
    return math.fsum(values) if op == "sum" else float(len(values))


def _first(term: Term, row: int = 0) -> float | None:
    value = term.values[row]
    return None if value is None else float(value)


def _definition(term: Term) -> str:
    """``name = its formula = with the numbers = value`` (equal parts once), for a value
    the same on every row of the group (row 0 stands for them)."""
    (value,) = term.args
    parts = [term.symbol, render(value, None)]
    if value.op not in ("leaf", "named", "lit", "eps"):
        parts.append(_render_node(value, 0)[0])
    parts.append(fmt(_first(term)))
    return " = ".join(dict.fromkeys(parts))


# --------------------------------------------------------------------------- explain's use


@dataclass(frozen=True)
class FilledIn:
    """One group's filled-in formula: the formula line in symbols, the lines stating the
    numbers it shares (named values, batch statistics), per shown row the formula with its
    numbers and value (None: undefined) and the rule that sets its advantage instead (see
    :func:`_overrides`); the group's valid count, mean and variance as the formula reads
    them; ``per_reward``: each reward column z-scored on its own (GDPO)."""

    formula: str
    steps: tuple[str, ...]
    rows: tuple[tuple[str, float | None], ...]
    overrides: tuple[str | None, ...]
    n: int
    mean: float | None
    var: float | None
    per_reward: bool


def context(
    options: AdvantageOptions,
    rewards: Sequence[float | None],
    groups: Sequence[int],
    lengths: Sequence[float | None] | None = None,
) -> ExplainContext:
    """The explain context of ``options`` over rows with these rewards, group indices and
    lengths (see :func:`grpo_cli.core.plan.estimator_context` for the engines')."""
    return ExplainContext(
        reward=_leaf(list(rewards), "r", varies=True),
        groups=list(groups),
        ddof=options.ddof,
        eps=Term([options.eps] * len(groups), "eps", (options.eps,), unfolded=True),  # type: ignore[arg-type]
        eps_mode=options.eps_mode,
        singleton_unit=options.singleton == "verl",
        length=None if lengths is None else _leaf(list(lengths), "L", varies=True),
        token_weighted=options.token_weighted,
        shaped_clip=options.clip if options.clip_stage == "shaped" else None,
    )


def fill_in(
    estimator: Estimator,
    options: AdvantageOptions,
    rewards: Sequence[float | None],
    groups: Sequence[int],
    shown: Sequence[int],
    lengths: Sequence[float | None] | None = None,
    columns: Sequence[Sequence[float | None]] = (),
) -> FilledIn:
    """The formula the engines run (:func:`grpo_cli.core.estimators.formula`) over these
    rows (one batch: each row's reward, group index, length and value of each reward
    column), filled in for the rows at positions ``shown`` (one group)."""
    ctx = context(options, rewards, groups, lengths)
    made: list[ExplainContext] = []

    def per_reward() -> list[ExplainContext]:
        made.extend(replace(ctx, reward=_leaf(list(c), "r", varies=True)) for c in columns)
        return made

    result = _term(formula(ctx, options, estimator, per_reward), ctx.size)
    if made:
        formula_line, steps, rows = _per_reward(ctx, made, result, shown, options)
    else:
        formula_line = (
            "; ".join([*(f"{t.symbol} = {render(t.args[0], None)}" for t in ctx.row_named), ""])
            + f"A = {render(result, None)}"
        )
        steps = tuple(dict.fromkeys([*ctx.steps, *ctx.batch_lines()]))
        rows = []
        for i in shown:
            prefix = "".join(f"{t.symbol} = {_row_text(t.args[0], i)}; " for t in ctx.row_named)
            rows.append((prefix + render(result, i), _number(result, i)))
    first = shown[0]
    return FilledIn(
        formula_line,
        steps,
        tuple(rows),
        _overrides(ctx, result, shown, options, estimator, per_reward=bool(made)),
        _count(ctx, first),
        _first(ctx.group_mean(), first),
        _first(ctx.group_var(), first),
        bool(made),
    )


def _overrides(
    ctx: ExplainContext,
    result: Term,
    shown: Sequence[int],
    options: AdvantageOptions,
    estimator: Estimator,
    *,
    per_reward: bool,
) -> tuple[str | None, ...]:
    """Per shown row, the name of the rule that sets its advantage instead of the
    formula's value ``result``: a policy's override (``nulls``, ``singleton``: see
    :func:`grpo_cli.core.policies.overrides`), ``constant`` (the zero-variance rule; not
    under GDPO, which z-scores each reward alone), ``clip``
    (:func:`grpo_cli.core.policies.final_clip`), or None."""
    rules = overrides(ctx, options, estimator, singleton=ctx.is_singleton())
    if not per_reward:
        rules.append(("constant", ctx.is_constant(), 0.0))
    bounds = final_clip(options, estimator)
    names: list[str | None] = []
    for i in shown:
        name = next((name for name, holds, _ in rules if holds.values[i]), None)
        value = _number(result, i)
        if name is None and value is not None and bounds is not None:
            name = "clip" if value < bounds[0] or value > bounds[1] else None
        names.append(name)
    return tuple(names)


def _number(term: Term, row: int) -> float | None:
    value = term.values[row]
    return None if value is None or math.isnan(float(value)) else float(value)


def _per_reward(
    ctx: ExplainContext,
    rewards: list[ExplainContext],
    result: Term,
    shown: Sequence[int],
    options: AdvantageOptions,
) -> tuple[str, tuple[str, ...], list[tuple[str, float | None]]]:
    """GDPO's formula line, steps and rows, read from its evaluation: each reward
    column's group statistics and ``z``, the weighted sum ``s`` and its batch whitening
    (``where(flat, 0, norm(x - mean_b, var_b))``, ``x``: ``s`` clipped under clip_stage
    shaped)."""
    ddof, first = options.ddof, shown[0]
    lines = [
        f"n = {_count(ctx, first)} valid rewards; aggregation normalize_then_sum: each reward "
        "column is z-scored in the group on its own"
    ]
    zs = [t for t in ctx.row_named if t.symbol == "z"]
    s = next(t for t in reversed(ctx.row_named) if t.symbol == "s")
    for column, weight, r, z in zip(options.reward_cols, options.weights, rewards, zs, strict=True):
        n = _count(r, first)
        mean, var = (_first(r.reward_stat(name), first) for name in ("mean", "var"))
        head = f"{column} (weight {fmt(weight)}): n = {n}"
        if r.singleton_unit and n == 1:
            lines.append(f"{head}; singleton=verl: mean 0, std 1")
        elif mean is None:
            lines.append(f"{head}; no valid value: z null")
        elif r.is_constant().values[first]:
            lines.append(f"{head}, mean = {fmt(mean)}; every value equal: z = 0")
        elif var is None:  # eps_mode var_floor floors it at eps: z is then 0, not null
            z_text = "z null" if all(z.values[i] is None for i in shown) else "z = 0 (var_floor)"
            lines.append(f"{head}, mean = {fmt(mean)}; std (ddof={ddof}) undefined: {z_text}")
        else:
            lines.append(f"{head}, mean = {fmt(mean)}, std (ddof={ddof}) = {fmt(math.sqrt(var))}")
    flat, _, whitened = result.args
    ((x, stats, ddof),) = ctx._batch.values()
    count = sum(1 for v in x.values if v is not None)
    mean_b, var_b = _first(stats["mean"]), _first(stats["var"])
    weighting = " token-weighted" if options.token_weighted else ""
    if flat.values[0]:
        lines.append(f"every value of s in the batch ({count}) is equal: every advantage is 0")
    else:
        lines.append(
            f"s whitened over the batch's {count} values of s{weighting}: mean_b = "
            f"{fmt(mean_b)}, var_b (ddof={ddof}) = {fmt(var_b)}"
        )
    rows: list[tuple[str, float | None]] = []
    for i in shown:  # (a row without a reward is explain's "-")
        terms = [
            f"{fmt(w)} x {fmt(_first(z, i))}"
            for w, z, r in zip(options.weights, zs, rewards, strict=True)
            if z.values[i] is not None and r.reward.values[i] is not None
        ]
        text = f"s = {' + '.join(terms) or '0'} = {fmt(_first(s, i))}"
        if ctx.shaped_clip is not None:
            text += f", clipped: {fmt(_first(x, i))}"
        if flat.values[i]:
            rows.append((f"{text}; every s of the batch is equal", 0.0))
            continue
        centred = f"{fmt(_first(x, i))} - {fmt(mean_b)}"
        spread = _divisor(whitened, i)
        divided = centred if spread is None else f"({centred}) / {_wrap(spread, i, ATOM)}"
        rows.append((f"{text}; {divided}", _number(result, i)))
    # the spreads in symbols: (std + eps), sqrt(var + eps), ... (the group's: of a named var)
    group = _divisor(ctx.norm(ctx.reward, _leaf(ctx.reward.values, "var")), None)
    z_k = "r_k - mean_k" if group is None else f"(r_k - mean_k) / {_wrap(group, None, ATOM)}"
    if options.estimator != "grpo":
        z_k = f"{options.estimator} of r_k, {render(zs[0].args[0], None)}"
    batch = _divisor(whitened, None)
    a = "s - mean_b" if batch is None else f"(s - mean_b) / {_wrap(batch, None, ATOM)}"
    formula_line = f"z_k = {z_k}; s = sum_k w_k z_k; A = {a}"
    return formula_line, tuple(lines), rows


def _divisor(term: Term, row: int | None) -> Term | None:
    """The divisor of a normalised ``term`` (:meth:`FormulaContext.norm`): of the branch
    taken at ``row`` (in symbols: the general one) when it is a choice; None when nothing
    divides (eps_mode ``center``, ``positive_std`` where var is 0)."""
    if term.op == "where":
        cond, then, otherwise = term.args
        taken = otherwise if row is None or not cond.values[row] else then
        return _divisor(taken, row)
    return term.args[1] if term.op == "/" else None


def _count(ctx: ExplainContext, row: int) -> int:
    return int(ctx.count().values[row] or 0)


def _row_text(term: Term, row: int) -> str:
    text, number = render(term, row), fmt(_first(term, row))
    return text if text == number else f"{text} = {number}"

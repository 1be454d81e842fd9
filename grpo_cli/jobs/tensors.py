"""Advantages of tensors, inside a training step: :func:`group_advantages`.

The same formulas (through :class:`grpo_cli.engines.torch.TorchContext`) and policies as
:func:`grpo_cli.compute_advantages`, on the rewards' device, under ``torch.no_grad()``
(advantages are constants of the loss, as in TRL and verl).

Groups of G consecutive rows (``group_size=G``, or ``groups`` on the CPU laid out as
``arange(N // G).repeat_interleave(G)``: :func:`fixed_group_size`) take the fast path:
group statistics are reductions of the ``(N / G, G)`` view
(:class:`grpo_cli.engines.torch.FixedGroupContext`), no sort, no scatter. Other groups are
segments: indices are made dense by a sort (:func:`dense_index`; on the CPU not when they
are in [0, N) already: :func:`segment_codes`), every segment buffer has N entries (shapes
depend on N only: ``torch.compile``), scalars are filled on the device. On an accelerator
only these reach the host: prompt ids given as Python values (coded there, copied in
once), the count of NaN rewards where they are refused (``nulls="error"``, or no ``nulls=``
given and none in the preset: pass ``nulls=`` to skip it), and ``group_size`` with
``batch``'s check that every batch holds whole groups (and whether it holds them in runs:
the fast path).

Groups of which more than half hold one response (a per-response id passed as the group)
give one :class:`grpo_cli.core.errors.GrpoAdvWarning` a call, worded as the CLI's warning
(:func:`grpo_cli.core.run_summary.singleton_warning`), where the group codes are on the
host anyway: ``prompt_ids``, or ``groups`` on the CPU. ``groups`` on an accelerator are not
checked (a host sync every call); nor ``group_size=G``, whose groups hold G rows.

The arithmetic is float64 (within 1e-12 of the Polars engine); the result is cast to the
rewards' floating dtype (float32: within 6e-8 relative), torch's default dtype for integer
rewards. Errors name the arguments as Python keywords, with the type each takes.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import fields
from functools import lru_cache, partial
from numbers import Integral, Real
from typing import Any, Final

from grpo_cli.core.errors import GrpoAdvWarning, InputError, OptionsError, python_value
from grpo_cli.core.estimators import Estimator, get_estimator
from grpo_cli.core.names import match_name
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.policies import formula, policy_value, reads_batch
from grpo_cli.core.presets import merge_options
from grpo_cli.core.run_summary import singleton_warning
from grpo_cli.engines.torch import (
    FixedGroupContext,
    TorchContext,
    context_settings,
    resolve_device,
)

# Options that name columns, and the argument that stands for them here.
COLUMN_OPTIONS: Final[Mapping[str, str]] = {
    "group_cols": "groups",
    "reward_cols": "rewards",
    "reward_col": "rewards",
    "length_col": "lengths",
    "baseline_col": "baseline",
    "batch_col": "batch",
}
# Options that have no meaning for tensors: why, and what to do instead.
NO_MEANING: Final[Mapping[str, tuple[str, str]]] = {
    "step_rewards_col": (
        "process supervision reads lists of step rewards",
        "use grpo_cli.compute_advantages with step_rewards_col",
    ),
    "with_stats": (
        "the advantages alone are returned",
        "for the group statistics use grpo_cli.compute_advantages with with_stats=True",
    ),
    "advantage_col": ("the advantages are returned as a tensor, not a column", "leave it out"),
    "deterministic": ("it chooses between Polars' engines", "leave it out"),
}
# What an option field takes, by its annotation (``| None`` aside): the check, its words,
# an example where the field's default is None.
KINDS: Final[Mapping[str, tuple[Callable[[Any], bool], str, object]]] = {
    "int": (lambda v: isinstance(v, Integral) and not isinstance(v, bool), "an int", 8),
    "float": (lambda v: isinstance(v, Real) and not isinstance(v, bool), "a real number", None),
    "bool": (lambda v: isinstance(v, bool), "a bool", None),
    "str": (lambda v: isinstance(v, str), "a string", None),
    "tuple[float, ...]": (lambda v: _reals(v, None), "a sequence of real numbers", (1.0, 0.5)),
    "tuple[float, float]": (lambda v: _reals(v, 2), "a pair of real numbers", (-10.0, 10.0)),
}
# What NaN rewards mean under these null policies (TRL's): accepted without nulls= given.
COUNTED_NULLS: Final = ("zero", "fill_zero")
FIELDS: Final = {f.name: f for f in fields(AdvantageOptions)}


def group_advantages(
    rewards: Any,
    groups: Any = None,
    *,
    prompt_ids: Collection[Hashable] | None = None,
    batch: Any = None,
    lengths: Any = None,
    baseline: Any = None,
    weights: Any = None,
    preset: str | None = None,
    options: AdvantageOptions | None = None,
    device: Any = None,
    **overrides: Any,
) -> Any:
    """The advantages of ``rewards``, per group, on the rewards' device (or ``device``).

    Args:
        rewards: a tensor ``(N,)``, or ``(N, K)`` with one column per reward function,
            combined by ``aggregation``: weighted sum with NaN counting 0 (NaN when all K
            are; ``"sum_then_normalize"``) or GDPO (``"normalize_then_sum"``). NaN is a
            null reward: refused (one host sync) unless ``nulls`` is given or the chosen
            policy is ``"zero"``/``"fill_zero"`` (the ``trl*`` presets), as the trainers
            without None rewards (verl, OpenRLHF...) never produce one.
        groups: an integer tensor ``(N,)``, equal values for the responses of one prompt.
        prompt_ids: instead of ``groups``, N hashable prompt ids (verl's ``uid`` array).
        batch: an integer tensor ``(N,)``: batch statistics per value; default one batch.
        lengths: response lengths in tokens ``(N,)`` (``opo``, ``token_weighted``).
        baseline: a per-response baseline reward ``(N,)`` (``remax``; NaN for null).
        weights: one weight per reward function (the K columns: a sequence or a 1-D
            tensor, as TRL's reward_weights), default 1 each.
        preset: a trainer preset (``"trl"``, ``"verl"``, ``"openrlhf-rloo"``...); the
            ``overrides`` win over it. ``"nemo-rl-gdpo"``: give the K columns (and
            ``weights``) in the sorted order of their names, as NeMo-RL takes them.
        options: an :class:`AdvantageOptions` to start from (column names not read).
        device: where to compute (a ``torch.device`` or its name); the tensors are moved
            there and so is the result. Default: the rewards' device.
        **overrides: any :class:`AdvantageOptions` field that names no column:
            ``estimator``, ``ddof``, ``eps``, ``eps_mode``, ``singleton``, ``nulls``,
            ``clip``, ``clip_stage``, ``reward_clip``, ``whiten``, ``whiten_ddof``,
            ``whiten_eps``, ``whiten_eps_mode``, ``aggregation``, ``token_weighted``,
            ``reward_weights``; ``group_size=G`` makes consecutive runs of G rows the
            groups (instead of ``groups``).

    Returns:
        A tensor ``(N,)`` on the rewards' device, in the rewards' floating dtype
        (``torch.get_default_dtype()`` for integer rewards): the advantage, NaN where it is
        null (a null reward under ``nulls="exclude"``, ``singleton="null"``).
        ``singleton="drop"`` keeps the shape: those rows are NaN and left out of every
        statistic.

    Raises:
        OptionsError: unknown or conflicting options, a keyword of the wrong type (named
            with the type it takes), a missing ``groups``/``lengths``/``baseline`` the
            estimator needs, ``estimator="process"`` (step-reward lists: use
            :func:`grpo_cli.compute_advantages`), a device torch does not have.
        InputError: tensors of the wrong shape, dtype or device; NaN rewards, unless
            ``nulls`` counts them (see ``rewards``); a None prompt id.

    Infinite rewards are not refused (a host sync): under ``nulls="zero"`` (TRL's policy)
    the advantages are TRL's (:func:`_infinite_rewards`); otherwise their group's are NaN
    (their batch's when the formula reads batch statistics).
    """
    import torch

    with torch.no_grad():
        rewards = _rewards(torch, rewards)
        if device is not None:
            where = _device(torch, device)
            rewards, groups, prompt_ids, batch, lengths, baseline = (
                value.to(where) if isinstance(value, torch.Tensor) else value
                for value in (rewards, groups, prompt_ids, batch, lengths, baseline)
            )
        if isinstance(weights, torch.Tensor):  # TRL's reward_weights
            weights = weights.tolist()
        n, k = rewards.shape[0], 1 if rewards.dim() == 1 else rewards.shape[1]
        chosen = tensor_options(
            k,
            preset,
            options,
            overrides,
            weights=weights,
            lengths=lengths is not None,
            baseline=baseline is not None,
            batch=batch is not None,
        )
        estimator = get_estimator(chosen.estimator)
        _check_needs(chosen, estimator, lengths=lengths, baseline=baseline)
        batch_codes = None
        if batch is not None:
            batch_codes = segment_codes(torch, _index(torch, rewards, batch, "batch"))
        size = fixed_group_size(torch, rewards, groups, prompt_ids, chosen, batch)
        group = None
        if size is None:
            group = _group_codes(
                torch,
                rewards,
                groups,
                prompt_ids,
                chosen,
                estimator,
                batch=None if batch is None else (batch_codes, batch),
            )
        parts = [_view(p, size) for p in _reward_parts(torch, rewards, chosen.nulls)]
        reward = combined(torch, parts, chosen.weights)
        if chosen.reward_clip is not None:  # as grpo_cli.core.rewards: each part for GDPO
            parts = [part.clamp(*chosen.reward_clip) for part in parts]
            reward = reward.clamp(*chosen.reward_clip)
        context = TorchContext if size is None else partial(FixedGroupContext, size=size)
        ctx = context(
            torch=torch,
            group=group,
            groups=segments(group, n),
            batch=batch_codes,
            batches=segments(batch_codes, n),
            reward=reward,
            length=_column(torch, rewards, lengths, "lengths", size),
            baseline=_column(torch, rewards, baseline, "baseline", size),
            **context_settings(chosen),
        )
        if chosen.nulls == "error" or (
            "nulls" not in overrides and chosen.nulls not in COUNTED_NULLS
        ):
            _refuse_nulls(torch, parts, chosen.nulls == "error")
        dropped = None
        if chosen.singleton == "drop" and estimator.uses_groups:
            dropped = ctx.is_singleton()
            parts = [torch.where(dropped, float("nan"), part) for part in parts]
            ctx = ctx.with_reward(torch.where(dropped, float("nan"), reward))
        raw = formula(ctx, chosen, estimator, lambda: [ctx.with_reward(p) for p in parts])
        singleton = ctx.is_singleton() if estimator.uses_groups else None
        value = policy_value(
            ctx, torch.broadcast_to(raw, ctx.reward.shape), chosen, estimator, singleton=singleton
        )
        if dropped is not None:
            value = torch.where(dropped, float("nan"), value)
        dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
        return _infinite_rewards(ctx, parts, value, dtype, chosen, estimator).reshape(n)


def _infinite_rewards(
    ctx: TorchContext,
    parts: Sequence[Any],
    value: Any,
    dtype: Any,
    options: AdvantageOptions,
    estimator: Estimator,
) -> Any:
    """``value`` in ``dtype``, on the rows whose group (batch, when the formula reads batch
    statistics) holds an infinite reward:

    - under ``nulls="zero"``, what TRL gives: TRL applies ``nan_to_num(nan=0.0)`` to every
      advantage, which the float arithmetic here reproduces (NaN-aware statistics, as
      TRL's ``nanmean``/``nanstd``) once a group or batch holding both ``+inf`` and
      ``-inf`` is NaN (its mean is): then NaN is 0 and an infinity the dtype's largest
      finite value (``trl``: the group 0; ``trl-batch``: the batch 0; ``trl-none``: the
      infinity's row 0, the group's other rows ``-/+ finfo(dtype).max`` for ``+/-inf``).
      GDPO keeps its value: a reward whose group holds an infinity has NaN z-scores
      there, which its sum counts as 0, as TRL's ``nansum`` does.
    - otherwise NaN: else the NaN of ``inf - inf`` would pass for a null reward and leave
      advantages of 0.

    Nothing to do when the one reward is known finite (``ctx.finite``), unless a batch sum
    of ``nulls="zero"`` could overflow.
    """
    torch = ctx.torch
    batch = reads_batch(options, estimator)
    if (
        ctx.finite
        and len(parts) == 1
        and parts[0] is ctx.reward
        and not (batch and options.nulls == "zero")
    ):
        return value.to(dtype)
    agg = ctx.batch_agg if batch else ctx.group_agg
    if options.nulls != "zero":
        spoiled = agg(_any(torch, parts, torch.isinf).to(torch.float64), "sum") > 0
        return torch.where(spoiled, float("nan"), value).to(dtype)
    if options.aggregation == "normalize_then_sum":
        return value.to(dtype)
    total = agg(ctx.reward, "sum")  # NaN with both infinities, +-inf with one (nulls left out)
    value = torch.where(torch.isnan(total), float("nan"), value).to(dtype)
    return torch.where(torch.isfinite(total), value, value.nan_to_num(nan=0.0))


def tensor_options(
    k: int,
    preset: str | None,
    options: AdvantageOptions | None,
    overrides: Mapping[str, Any],
    *,
    weights: Sequence[float] | None,
    lengths: bool,
    baseline: bool,
    batch: bool,
) -> AdvantageOptions:
    """``options`` (default the defaults), the preset's, then the ``overrides`` (checked:
    :func:`_keyword`); the column options named after the tensors given (for the options'
    own checks)."""
    explicit = {name: _keyword(name, value) for name, value in overrides.items()}
    if weights is not None:
        explicit["reward_weights"] = _keyword("reward_weights", weights, "weights")
    if preset is not None and not isinstance(preset, str):
        raise OptionsError(
            f"preset must be a string, got {preset!r}",
            hint='e.g. preset="trl" (grpo-adv presets lists them)',
        )
    if options is not None and not isinstance(options, AdvantageOptions):
        raise OptionsError(
            f"options must be an AdvantageOptions, got {type(options).__name__}",
            hint="or pass the fields as keywords: group_advantages(rewards, groups, **fields)",
        )
    return _merged(k, preset, options, tuple(explicit.items()), lengths, baseline, batch)


@lru_cache(maxsize=64)
def _merged(
    k: int,
    preset: str | None,
    options: AdvantageOptions | None,
    explicit: tuple[tuple[str, Any], ...],
    lengths: bool,
    baseline: bool,
    batch: bool,
) -> AdvantageOptions:
    """The rest of :func:`tensor_options`, once for each distinct call (a trainer passes the
    same options every step; the options are frozen): merged and checked."""
    merged = merge_options(preset, dict(explicit))
    base = options or AdvantageOptions()
    given = merged.get("reward_weights", base.reward_weights)
    if given is not None and len(tuple(given)) != k:
        raise OptionsError(
            f"{len(tuple(given))} reward weight(s) for {k} reward function(s) "
            "(the columns of rewards)",
            hint="give one weight per column of rewards",
            value=given,
        )
    names = ("reward",) if k == 1 else tuple(f"reward_{j}" for j in range(k))
    return base.with_overrides(
        **merged,
        group_cols=("group",),
        reward_cols=names,
        length_col="lengths" if lengths else None,
        baseline_col="baseline" if baseline else None,
        batch_col="batch" if batch else None,
        step_rewards_col=None,
        with_stats=False,
    )


def _keyword(name: str, value: Any, argument: str | None = None) -> Any:
    """The option field ``name``'s ``value`` (given as ``argument``, default ``name``),
    checked against the field's annotation (:data:`KINDS`) and made a plain Python value.
    Column options and those without meaning for tensors say so; an unknown name suggests
    the closest keyword."""
    if name in COLUMN_OPTIONS:
        raise OptionsError(
            f"{name} names a column; group_advantages takes tensors",
            hint=f"pass the tensor as {COLUMN_OPTIONS[name]}",
        )
    if name in NO_MEANING:
        why, hint = NO_MEANING[name]
        raise OptionsError(f"{name} has no meaning for tensors: {why}", hint=hint)
    field = FIELDS.get(name)
    if field is None:
        keywords = [k for k in inspect.signature(group_advantages).parameters if k != "overrides"]
        keywords += [f for f in FIELDS if f not in COLUMN_OPTIONS and f not in NO_MEANING]
        found = match_name(name, keywords, "group_advantages keyword")  # raises if none
        raise OptionsError(
            f"unknown group_advantages keyword {name!r}", hint=f"did you mean {found}?"
        )
    if value is None and str(field.type).endswith(" | None"):
        return None
    annotation = str(field.type).removesuffix(" | None")
    check, words, example = KINDS[annotation]
    if not check(value):
        shown = field.default if field.default is not None else example
        raise OptionsError(
            f"{argument or name} must be {words}, got {value!r}",
            hint=f"e.g. {argument or name}={python_value(shown)}",
            value=value,
        )
    if annotation in ("int", "float"):
        return int(value) if annotation == "int" else float(value)
    return tuple(float(v) for v in value) if annotation.startswith("tuple") else value


def _reals(value: Any, length: int | None) -> bool:
    """Whether ``value`` is a sequence of real numbers (of ``length`` items, if given)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | Collection):
        return False
    items = list(value)
    real = all(isinstance(v, Real) and not isinstance(v, bool) for v in items)
    return real and (length is None or len(items) == length)


def _device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device``; an unknown name, or CUDA where torch sees none, is
    an OptionsError."""
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        raise OptionsError(
            f"device must be a torch.device or its name, got {device!r}",
            hint='e.g. device="cuda", device="cuda:1" or device="cpu"',
            value=device,
        ) from None
    if where.type == "cuda":
        resolve_device(torch, "cuda")
    return where


def _check_needs(
    options: AdvantageOptions, estimator: Estimator, *, lengths: Any, baseline: Any
) -> None:
    """What the estimator needs, named by this function's arguments, then the options'
    own checks."""
    if estimator.unit == "step":
        raise OptionsError(
            f"estimator {estimator.name} works on lists of step rewards, not on a tensor",
            hint="use grpo_cli.compute_advantages with step_rewards_col",
        )
    for need, given, argument, what in (
        ("length", lengths, "lengths", "the response lengths in tokens"),
        ("baseline", baseline, "baseline", "the baseline rewards"),
    ):
        if need in estimator.needs and given is None:
            raise OptionsError(
                f"estimator {estimator.name} needs {argument}",
                hint=f"pass {what}, a tensor of shape (N,)",
            )
    if options.token_weighted and lengths is None:
        raise OptionsError(
            "token_weighted needs lengths",
            hint="pass the response lengths in tokens, a tensor of shape (N,)",
        )
    options.check_estimator_needs(estimator)


def _rewards(torch: Any, rewards: Any) -> Any:
    if not isinstance(rewards, torch.Tensor):
        raise InputError(
            f"rewards must be a torch tensor, got {type(rewards).__name__}",
            hint="wrap them with torch.as_tensor(rewards)",
        )
    if rewards.dim() not in (1, 2) or rewards.is_complex():
        raise InputError(
            f"rewards must be a real tensor of shape (N,) or (N, K), got {tuple(rewards.shape)}",
            hint="one row per response; K columns for K reward functions",
        )
    return rewards


def _index(torch: Any, rewards: Any, index: Any, name: str) -> Any:
    """``index`` checked: an integer (or bool) tensor of shape (N,) on the rewards' device."""
    if not isinstance(index, torch.Tensor):
        raise InputError(
            f"{name} must be an integer tensor, got {type(index).__name__}",
            hint="pass torch.as_tensor(...), or prompt ids (any hashable values) as prompt_ids"
            if name == "groups"
            else "pass torch.as_tensor(...)",
        )
    if index.is_floating_point() or index.is_complex():
        raise InputError(
            f"{name} must hold integers, got {index.dtype}",
            hint="equal values mark one group; convert with .long()",
        )
    return _same_rows(rewards, index, name)


def _column(torch: Any, rewards: Any, values: Any, name: str, size: int | None) -> Any:
    """A per-response float64 column (lengths, baseline), NaN for null, in the layout of
    the rewards (:func:`_view`); None when not given."""
    if values is None:
        return None
    if not isinstance(values, torch.Tensor):
        raise InputError(
            f"{name} must be a tensor, got {type(values).__name__}",
            hint="pass torch.as_tensor(...)",
        )
    return _view(_same_rows(rewards, values, name).to(torch.float64), size)


def _same_rows(rewards: Any, tensor: Any, name: str) -> Any:
    if tuple(tensor.shape) != (rewards.shape[0],):
        raise InputError(
            f"{name} has shape {tuple(tensor.shape)}, the rewards {rewards.shape[0]} rows",
            hint=f"give one value per response: shape ({rewards.shape[0]},)",
        )
    if tensor.device != rewards.device:
        raise InputError(
            f"{name} is on {tensor.device}, the rewards on {rewards.device}",
            hint="move it with .to(rewards.device)",
        )
    return tensor


def segments(codes: Any, n: int) -> int:
    """The size of the segment buffers over ``codes`` (None: no codes): N (shapes that
    depend on N only), on the CPU the largest code + 1 (a host sync there is free)."""
    if codes is None or codes.device.type != "cpu" or not n:
        return n
    return int(codes.max()) + 1


def segment_codes(torch: Any, index: Any) -> Any:
    """Codes in [0, N) for the N values of ``index``, equal where the values are: on the
    CPU, values already in [0, N) are their own codes (a host sync there is free: no sort);
    else :func:`dense_index`."""
    n = index.shape[0]
    if index.device.type == "cpu" and n and int(index.min()) >= 0 and int(index.max()) < n:
        return index.long()
    return dense_index(torch, index)


def dense_index(torch: Any, index: Any) -> Any:
    """``torch.unique(index, return_inverse=True)[1]`` without a host sync: a sort, a
    running count of the first of each run of equal values, scattered back."""
    values, order = torch.sort(index)
    first = torch.ones_like(values, dtype=torch.int64)
    first[1:] = (values[1:] != values[:-1]).to(torch.int64)
    return torch.empty_like(order).scatter_(0, order, torch.cumsum(first, 0) - 1)


def _group_codes(
    torch: Any,
    rewards: Any,
    groups: Any,
    prompt_ids: Collection[Hashable] | None,
    options: AdvantageOptions,
    estimator: Estimator,
    batch: tuple[Any, Any] | None = None,
) -> Any:
    """The dense group codes, from one of ``groups``, ``prompt_ids`` or ``group_size``
    (without any, one group for estimators without groups). With ``group_size`` and
    ``batch`` (its codes and the tensor given), runs of G rows within each batch value."""
    n, device = rewards.shape[0], rewards.device
    given = [
        name
        for name, value in (
            ("groups", groups),
            ("prompt_ids", prompt_ids),
            ("group_size", options.group_size),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise OptionsError(
            f"{given[0]} and {given[1]} both give the groups",
            hint="pass one of them",
        )
    if isinstance(prompt_ids, torch.Tensor):
        groups, prompt_ids = prompt_ids, None
    if groups is not None:
        codes = segment_codes(torch, _index(torch, rewards, groups, "groups"))
        if codes.device.type == "cpu" and estimator.uses_groups:
            _warn_singletons(torch, codes, "groups")
        return codes
    if prompt_ids is not None:
        codes = _code_prompts(torch, rewards, prompt_ids)
        if estimator.uses_groups:
            _warn_singletons(torch, codes, "prompt_ids")
        return codes.to(device)
    if options.group_size is not None:
        if batch is not None:
            return _groups_within_batches(torch, *batch, options.group_size)
        if n % options.group_size:
            raise InputError(
                f"the rewards have {n} rows, not a multiple of group_size={options.group_size}",
                hint="positional groups are consecutive runs of group_size rows; check the "
                "value (the trainer's num_generations) or pass groups",
                value=options.group_size,
            )
        return torch.arange(n, device=device) // options.group_size
    if estimator.uses_groups:
        raise OptionsError(
            f"estimator {estimator.name} needs the groups: groups, prompt_ids or group_size",
            hint="equal values mark the responses of one prompt",
        )
    return torch.zeros(n, dtype=torch.int64, device=device)


def fixed_group_size(
    torch: Any,
    rewards: Any,
    groups: Any,
    prompt_ids: Any,
    options: AdvantageOptions,
    batch: Any,
) -> int | None:
    """G when the groups are the consecutive runs of G rows (the fast path,
    :class:`grpo_cli.engines.torch.FixedGroupContext`), else None (the general path, which
    also refuses bad arguments): ``group_size=G`` dividing N, with a ``batch`` constant on
    each run (a host sync, as that path's check); or ``groups`` on the CPU (never an
    accelerator: a host sync) in runs of G >= 2 equal values, increasing from run to run
    (``arange(N // G).repeat_interleave(G)``, TRL's layout)."""
    n, size = rewards.shape[0], options.group_size
    if sum(given is not None for given in (groups, prompt_ids, size)) != 1:
        return None
    if size is not None:
        if not isinstance(size, int) or size < 1 or n % size:
            return None
        runs = None if batch is None else batch.reshape(-1, size)  # checked by then
        return None if runs is not None and not bool((runs == runs[:, :1]).all()) else size
    if not (
        isinstance(groups, torch.Tensor)
        and groups.device.type == "cpu"
        and tuple(groups.shape) == (n,)
        and n >= 2
        and not (groups.is_floating_point() or groups.is_complex())
    ):
        return None
    size = _first_run(torch, groups)
    if size < 2 or n % size:
        return None
    runs = groups.reshape(-1, size)
    whole = bool((runs == runs[:, :1]).all()) and bool((runs[1:, 0] > runs[:-1, 0]).all())
    return size if whole else None


def _first_run(torch: Any, values: Any) -> int:
    """The length of the run of values equal to the first (looked at in doubling prefixes:
    O(run), not O(N))."""
    span = 64
    while True:
        prefix = values[:span]
        differs = torch.nonzero(prefix != prefix[0])
        if differs.numel():
            return int(differs[0, 0])
        if span >= values.shape[0]:
            return int(values.shape[0])
        span *= 2


def _warn_singletons(torch: Any, codes: Any, given: str) -> None:
    """Warn when more than half of the groups (dense ``codes`` on the host, from the
    argument ``given``) hold one response."""
    counts = torch.bincount(codes)
    groups = int((counts > 0).sum())  # codes may skip values (segment_codes)
    found = singleton_warning(int((counts == 1).sum()), groups, given, "groups or prompt_ids")
    for line in found:  # stack: here, _group_codes, group_advantages, its caller
        warnings.warn(str(line), GrpoAdvWarning, stacklevel=4)


def _groups_within_batches(torch: Any, batch: Any, values: Any, size: int) -> Any:
    """Each batch value's rows, in order, cut into runs of ``size`` (``batch``: the dense
    codes of the tensor ``values``): a row's rank in the rows stably sorted by batch //
    ``size``. A batch whose rows are not a multiple of ``size`` is refused."""
    n = batch.shape[0]
    order = torch.sort(batch, stable=True).indices
    counts = torch.bincount(batch, minlength=n)
    uneven = counts % size != 0
    if bool(uneven.any()):
        code = int(torch.nonzero(uneven)[0])
        value = values[int(torch.nonzero(batch == code)[0])].item()
        raise InputError(
            f"batch={value} has {int(counts[code])} rows, not a multiple of group_size={size}",
            hint="positional groups are consecutive runs of group_size rows within each "
            "batch; check the value (the trainer's num_generations) or pass groups",
            value=size,
        )
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(n, device=batch.device))
    return rank // size


def _code_prompts(torch: Any, rewards: Any, prompt_ids: Collection[Hashable]) -> Any:
    """Prompt ids coded on the host (first appearance order), a CPU tensor."""
    if isinstance(prompt_ids, str | bytes) or len(prompt_ids) != rewards.shape[0]:
        count = 1 if isinstance(prompt_ids, str | bytes) else len(prompt_ids)
        raise InputError(
            f"{count} prompt id(s) for {rewards.shape[0]} rewards",
            hint="give one prompt id per response",
        )
    codes: dict[Hashable, int] = {}
    try:
        index = [codes.setdefault(p, len(codes)) for p in prompt_ids]
    except TypeError:
        raise InputError(
            "prompt ids must be hashable (strings, numbers, tuples)",
            hint="or pass an integer tensor as groups",
        ) from None
    if None in codes:
        raise InputError(
            f"prompt id {list(prompt_ids).index(None)} is None",
            hint="every response needs the id of its prompt",
        )
    return torch.tensor(index, dtype=torch.int64)


def _view(tensor: Any, size: int | None) -> Any:
    """The ``(N / size, size)`` view of ``tensor``'s rows, the layout of
    :class:`grpo_cli.engines.torch.FixedGroupContext`; without a size ``tensor`` itself."""
    return tensor if size is None else tensor.reshape(-1, size)


def _reward_parts(torch: Any, rewards: Any, nulls: str) -> list[Any]:
    """Each reward function's column as float64, NaN for null (``fill_zero``: 0)."""
    values = rewards.to(torch.float64)
    parts = [values] if values.dim() == 1 else list(values.unbind(1))
    if nulls == "fill_zero":
        parts = [torch.where(torch.isnan(p), 0.0, p) for p in parts]
    return parts


def combined(torch: Any, parts: Sequence[Any], weights: Sequence[float]) -> Any:
    """The one reward the estimator sees (:func:`grpo_cli.core.rewards.combined_reward`):
    ``sum_k w_k r_k`` with NaN counting 0, NaN where every ``r_k`` is. A NaN term counts 0
    too (``0 * inf``: TRL's ``nansum``)."""
    if len(parts) == 1 and tuple(weights) == (1.0,):
        return parts[0]
    terms = [p * w for p, w in zip(parts, weights, strict=True)]
    terms = [torch.where(torch.isnan(t), 0.0, t) for t in terms]
    all_null = ~_any(torch, parts, lambda p: ~torch.isnan(p))
    return torch.where(all_null, float("nan"), sum(terms[1:], terms[0]))


def _any(torch: Any, parts: Sequence[Any], test: Any) -> Any:
    """Per row, whether ``test`` holds in any of ``parts``."""
    found = torch.zeros_like(parts[0], dtype=torch.bool)
    for part in parts:
        found = found | test(part)
    return found


def _refuse_nulls(torch: Any, parts: Sequence[Any], asked: bool) -> None:
    """NaN rewards refused (one host sync): under ``nulls="error"`` (``asked``), or where
    no ``nulls`` says what they mean."""
    count = int(_any(torch, parts, torch.isnan).sum())
    if count and asked:
        raise InputError(
            f'{count} row(s) have a NaN reward (nulls="error")',
            hint='choose nulls="exclude", zero or fill_zero to accept them',
        )
    if count:
        raise InputError(
            f"{count} row(s) have a NaN reward, and no nulls= says what it means",
            hint='pass nulls="exclude" (left out, advantage NaN), "zero" (left out, advantage '
            '0: TRL), "fill_zero" (a reward of 0) or "error"',
        )

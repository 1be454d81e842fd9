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
once), ``nulls="error"``'s count of NaN rewards, and ``group_size`` with ``batch``'s check
that every batch holds whole groups (and whether it holds them in runs: the fast path).

Groups of which more than half hold one response (a per-response id passed as the group)
give one :class:`grpo_cli.core.errors.GrpoAdvWarning` a call, worded as the CLI's warning
(:func:`grpo_cli.core.run_summary.singleton_warning`), where the group codes are on the
host anyway: ``prompt_ids``, or ``groups`` on the CPU. ``groups`` on an accelerator are not
checked (a host sync every call); nor ``group_size=G``, whose groups hold G rows.

The arithmetic is float64 (within 1e-12 of the Polars engine); the result is cast to the
rewards' floating dtype (float32: within 6e-8 relative), float64 for integer rewards.
Errors name the arguments as Python keywords.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Hashable, Mapping, Sequence
from functools import partial
from typing import Any, Final

from grpo_cli.core.errors import GrpoAdvWarning, InputError, OptionsError
from grpo_cli.core.estimators import Estimator, get_estimator
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.policies import formula, policy_value, reads_batch
from grpo_cli.core.presets import merge_options
from grpo_cli.core.run_summary import singleton_warning
from grpo_cli.engines.torch import FixedGroupContext, TorchContext, context_settings

# Options that name columns, and the argument that stands for them here (None: no meaning).
COLUMN_OPTIONS: Final[Mapping[str, str | None]] = {
    "group_cols": "groups",
    "reward_cols": "rewards",
    "reward_col": "rewards",
    "length_col": "lengths",
    "baseline_col": "baseline",
    "batch_col": "batch",
    "step_rewards_col": None,
    "with_stats": None,
    "advantage_col": None,
    "deterministic": None,
}


def group_advantages(
    rewards: Any,
    groups: Any = None,
    *,
    prompt_ids: Collection[Hashable] | None = None,
    batch: Any = None,
    lengths: Any = None,
    baseline: Any = None,
    weights: Sequence[float] | None = None,
    preset: str | None = None,
    options: AdvantageOptions | None = None,
    **overrides: Any,
) -> Any:
    """The advantages of ``rewards``, per group, on the rewards' device.

    Args:
        rewards: a tensor ``(N,)``, or ``(N, K)`` with one column per reward function,
            combined by ``aggregation``: weighted sum with NaN counting 0 (NaN when all K
            are; ``"sum_then_normalize"``) or GDPO (``"normalize_then_sum"``). NaN is a
            null reward.
        groups: an integer tensor ``(N,)``, equal values for the responses of one prompt.
        prompt_ids: instead of ``groups``, N hashable prompt ids (verl's ``uid`` array).
        batch: an integer tensor ``(N,)``: batch statistics per value; default one batch.
        lengths: response lengths in tokens ``(N,)`` (``opo``, ``token_weighted``).
        baseline: a per-response baseline reward ``(N,)`` (``remax``; NaN for null).
        weights: one weight per reward function (the K columns), default 1 each.
        preset: a trainer preset (``"trl"``, ``"verl"``, ``"openrlhf-rloo"``...); the
            ``overrides`` win over it.
        options: an :class:`AdvantageOptions` to start from (column names not read).
        **overrides: any :class:`AdvantageOptions` field that names no column:
            ``estimator``, ``ddof``, ``eps``, ``eps_mode``, ``singleton``, ``nulls``,
            ``clip``, ``clip_stage``, ``reward_clip``, ``whiten``, ``whiten_ddof``,
            ``whiten_eps``, ``whiten_eps_mode``, ``aggregation``, ``token_weighted``,
            ``reward_weights``; ``group_size=G`` makes consecutive runs of G rows the
            groups (instead of ``groups``).

    Returns:
        A tensor ``(N,)`` on the rewards' device, in the rewards' floating dtype (float64
        for integer rewards): the advantage, NaN where it is null (a null reward under
        ``nulls="exclude"``, ``singleton="null"``). ``singleton="drop"`` keeps the shape:
        those rows are NaN and left out of every statistic.

    Raises:
        OptionsError: unknown or conflicting options, a missing ``groups``/``lengths``/
            ``baseline`` the estimator needs, ``estimator="process"`` (step-reward lists:
            use :func:`grpo_cli.compute_advantages`).
        InputError: tensors of the wrong shape, dtype or device; NaN rewards under
            ``nulls="error"``; a None prompt id.

    Infinite rewards are not refused (a host sync): their group's advantages are NaN (their
    batch's when the formula reads batch statistics).
    """
    import torch

    with torch.no_grad():
        rewards = _rewards(torch, rewards)
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
        parts = _reward_parts(torch, rewards, chosen.nulls)
        if chosen.nulls == "error":
            _refuse_nulls(torch, parts)
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
            length=None if lengths is None else _column(torch, rewards, lengths, "lengths"),
            baseline=None if baseline is None else _column(torch, rewards, baseline, "baseline"),
            **context_settings(chosen),
        )
        dropped = None
        if chosen.singleton == "drop" and estimator.uses_groups:
            dropped = ctx.is_singleton()
            parts = [torch.where(dropped, float("nan"), part) for part in parts]
            ctx = ctx.with_reward(torch.where(dropped, float("nan"), reward))
        raw = formula(ctx, chosen, estimator, lambda: [ctx.with_reward(p) for p in parts])
        singleton = ctx.is_singleton() if estimator.uses_groups else None
        value = policy_value(
            ctx, torch.broadcast_to(raw, (n,)), chosen, estimator, singleton=singleton
        )
        if dropped is not None:
            value = torch.where(dropped, float("nan"), value)
        value = _infinite_spoils(ctx, parts, value, batch_level=reads_batch(chosen, estimator))
        dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
        return value.to(dtype)


def _infinite_spoils(
    ctx: TorchContext, parts: Sequence[Any], value: Any, *, batch_level: bool
) -> Any:
    """``value`` NaN on the rows whose group (batch, when the formula reads batch
    statistics) holds an infinite reward: else the NaN of ``inf - inf`` would pass for a
    null reward and leave advantages of 0."""
    torch = ctx.torch
    flag = _any(torch, parts, torch.isinf).to(torch.float64)
    spoiled = (ctx.batch_agg(flag, "sum") if batch_level else ctx.group_agg(flag, "sum")) > 0
    return torch.where(spoiled, float("nan"), value)


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
    """``options`` (default the defaults), the preset's, then the ``overrides``; the column
    options named after the tensors given (for the options' own checks)."""
    for name in overrides:
        if name in COLUMN_OPTIONS:
            argument = COLUMN_OPTIONS[name]
            hint = f"pass the tensor as {argument}" if argument else "it has no meaning for tensors"
            raise OptionsError(f"{name} names a column; group_advantages takes tensors", hint=hint)
    explicit = dict(overrides)
    if weights is not None:
        explicit["reward_weights"] = tuple(weights)
    merged = merge_options(preset, explicit)
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


def _column(torch: Any, rewards: Any, values: Any, name: str) -> Any:
    """A per-response float64 column (lengths, baseline), NaN for null."""
    if not isinstance(values, torch.Tensor):
        raise InputError(
            f"{name} must be a tensor, got {type(values).__name__}",
            hint="pass torch.as_tensor(...)",
        )
    return _same_rows(rewards, values, name).to(torch.float64)


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


def _reward_parts(torch: Any, rewards: Any, nulls: str) -> list[Any]:
    """Each reward function's column as float64, NaN for null (``fill_zero``: 0)."""
    values = rewards.to(torch.float64)
    parts = [values] if values.dim() == 1 else list(values.unbind(1))
    if nulls == "fill_zero":
        parts = [torch.where(torch.isnan(p), 0.0, p) for p in parts]
    return parts


def combined(torch: Any, parts: Sequence[Any], weights: Sequence[float]) -> Any:
    """The one reward the estimator sees (:func:`grpo_cli.core.rewards.combined_reward`):
    ``sum_k w_k r_k`` with NaN counting 0, NaN where every ``r_k`` is."""
    if len(parts) == 1 and tuple(weights) == (1.0,):
        return parts[0]
    terms = [torch.where(torch.isnan(p), 0.0, p * w) for p, w in zip(parts, weights, strict=True)]
    all_null = ~_any(torch, parts, lambda p: ~torch.isnan(p))
    return torch.where(all_null, float("nan"), sum(terms[1:], terms[0]))


def _any(torch: Any, parts: Sequence[Any], test: Any) -> Any:
    """Per row, whether ``test`` holds in any of ``parts``."""
    found = torch.zeros_like(parts[0], dtype=torch.bool)
    for part in parts:
        found = found | test(part)
    return found


def _refuse_nulls(torch: Any, parts: Sequence[Any]) -> None:
    """``nulls="error"``: NaN rewards refused (one host sync)."""
    count = int(_any(torch, parts, torch.isnan).sum())
    if count:
        raise InputError(
            f'{count} row(s) have a NaN reward (nulls="error")',
            hint='choose nulls="exclude", zero or fill_zero to accept them',
        )

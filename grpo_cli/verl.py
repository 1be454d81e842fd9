"""grpo-adv inside verl: every preset and estimator as a verl advantage estimator.

::

    python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo_adv_rloo ...

verl 0.9.1 imports this module in each of its processes through grpo-adv's ``verl.plugins``
entry point (unless ``VERL_USE_EXTERNAL_PLUGINS`` leaves it out; then ``import
grpo_cli.verl`` where verl computes the advantages). Importing it registers, with verl's
``register_adv_est``, ``grpo_adv_<name>`` (``-`` written ``_``) for each grpo-adv estimator
(its default options) and each preset, so no name can clash with verl's own. Left out:
``process`` (step-reward lists) and the GDPO presets (``aggregation="normalize_then_sum"``),
as verl hands a registered estimator only the summed ``token_level_rewards``; ``remax``, as
verl's trainer makes the greedy baselines for its own ``remax`` alone. :func:`register` adds
one under a name of your choice.

Needs the ``verl`` extra (``pip install -e '.[verl]'``), written against verl 0.9.1.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import register_adv_est

from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.presets import PRESETS, merge_options
from grpo_cli.jobs.tensors import group_advantages

__all__ = ["PREFIX", "register"]

PREFIX = "grpo_adv_"


def register(name: str, preset: str | None = None, **options: Any) -> Any:
    """Register, under ``grpo_adv_<name>`` (``-`` written ``_``), a verl advantage estimator
    computing :func:`grpo_cli.group_advantages` with ``preset`` and ``options``; returns it.

    The estimator has verl's signature (``compute_grpo_outcome_advantage``'s) and reads the
    outcome reward ``token_level_rewards.sum(-1)``, the groups ``index`` (verl's ``uid``),
    the lengths ``response_mask.sum(-1)`` and ``reward_baselines`` (``remax``). It returns
    ``(advantages, returns)``, both the advantage on every token of ``response_mask`` and 0
    elsewhere, as verl's outcome estimators do. ``epsilon``, when verl passes it, is the
    ``eps``. It raises :class:`OptionsError` for ``norm_adv_by_std_in_grpo=False`` (in the
    arguments or ``config``: the name chooses the formula, e.g. ``grpo_adv_verl_dr_grpo``),
    and :class:`InputError` for a NaN advantage (where the formula is undefined, e.g. a
    one-response group under ``singleton="null"``), which would train as a NaN gradient.

    Raises:
        ValueError: ``grpo_adv_<name>`` is registered already (verl's own check).
    """
    full = PREFIX + name.replace("-", "_")

    def estimate(
        token_level_rewards: Any,
        response_mask: Any,
        index: Any = None,
        epsilon: float | None = None,
        norm_adv_by_std_in_grpo: bool = True,
        config: Any = None,
        reward_baselines: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        if not norm_adv_by_std_in_grpo or (
            config is not None and not config.get("norm_adv_by_std_in_grpo", True)
        ):
            raise OptionsError(
                f"{full} does not read norm_adv_by_std_in_grpo=False",
                hint="the estimator's name chooses the formula: e.g. grpo_adv_verl_dr_grpo "
                "(no std), or grpo_cli.verl.register(name, preset, **options)",
            )
        eps = {} if epsilon is None else {"eps": epsilon}
        advantages = group_advantages(
            token_level_rewards.sum(-1),
            prompt_ids=index,
            lengths=response_mask.sum(-1),
            baseline=reward_baselines,
            preset=preset,
            **{**options, **eps},
        )
        nan = int(advantages.isnan().sum())
        if nan:
            raise InputError(
                f"{full} gave {nan} NaN advantage(s) of {advantages.shape[0]}, "
                "which would train as a NaN gradient",
                hint="the formula is undefined in their groups (e.g. one response under "
                "singleton='null'): raise actor_rollout_ref.rollout.n, or register other "
                "options with grpo_cli.verl.register",
            )
        mask = response_mask.bool()
        tokens = torch.where(mask, advantages.unsqueeze(-1), 0)
        return tokens, tokens

    estimate.__name__ = estimate.__qualname__ = full
    return register_adv_est(full)(estimate)


def _register_all() -> None:
    for name, est in ESTIMATORS.items():
        if est.unit == "response" and "baseline" not in est.needs:
            register(name, estimator=name)
    for name in PRESETS:
        if merge_options(name, {}).get("aggregation") != "normalize_then_sum":
            register(name, preset=name)


_register_all()

"""grpo-adv inside TRL's ``GRPOTrainer``: any preset or estimator in one line.

::

    from grpo_cli.trl import GRPOAdvTrainer

    trainer = GRPOAdvTrainer(model, reward_funcs, args=GRPOConfig(...), train_dataset=data,
                             advantage_options={"estimator": "rloo"})

Needs the ``trl`` extra (``pip install -e '.[trl]'``), written against TRL 1.16. It relies on
these TRL internals, pinned by ``tests/test_trl_plugin.py``: ``_calculate_rewards`` returns
the rewards of every process, gathered (``(N, K)``, NaN for a None reward);
``_generate_and_score_completions`` returns this process's rows (``len(inputs)`` of them, at
``process_index * len(inputs)`` in the gathered order) with ``advantages`` and
``completion_mask``, after extending ``_logs["advantages"]`` with the N gathered advantages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from trl import GRPOTrainer

from grpo_cli.core.errors import OptionsError
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.jobs.tensors import group_advantages

__all__ = ["GRPOAdvTrainer", "trl_preset"]


def trl_preset(args: Any) -> str:
    """The preset that reproduces the advantages of TRL's ``GRPOConfig`` ``args``:
    ``trl-gdpo`` for ``multi_objective_aggregation="normalize_then_sum"``, else ``trl``,
    ``trl-batch`` or ``trl-none`` for ``scale_rewards`` ``"group"``, ``"batch"``, ``"none"``."""
    if args.multi_objective_aggregation == "normalize_then_sum":
        return "trl-gdpo"
    return {"group": "trl", "batch": "trl-batch", "none": "trl-none"}[args.scale_rewards]


class GRPOAdvTrainer(GRPOTrainer):  # type: ignore[misc]
    """TRL's ``GRPOTrainer`` with grpo-adv's advantages.

    Args:
        advantage_preset: a grpo-adv preset (``"verl"``, ``"openrlhf-rloo"``...). Default:
            the ``trl*`` preset of ``args`` (:func:`trl_preset`, TRL's own numbers), unless
            ``advantage_options`` is an :class:`AdvantageOptions`. A ``trl*`` preset other
            than that one is refused (it would ignore ``args``).
        advantage_options: a mapping of :func:`grpo_cli.group_advantages` overrides
            (``{"estimator": "opo"}``: TRL's settings, one thing changed), which win over
            the preset; or an :class:`AdvantageOptions`, complete by itself. The reward
            weights are ``args.reward_weights``; the groups are TRL's (``num_generations``
            consecutive rows); the lengths (``opo``, ``token_weighted``) are the
            completions' token counts, gathered.
        *args, **kwargs: those of ``GRPOTrainer``.

    The advantages are computed once per generation on every process's rows (as TRL's), a
    null one (an unscorable completion) trains as 0 (TRL's ``nan_to_num``), and this
    process keeps its rows. The completions log (``log_completions``) shows the advantages
    trained on. Options are checked when the trainer is built.
    """

    def __init__(
        self,
        *args: Any,
        advantage_preset: str | None = None,
        advantage_options: AdvantageOptions | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        matching = trl_preset(self.args)
        if advantage_preset is None and not isinstance(advantage_options, AdvantageOptions):
            advantage_preset = matching
        elif advantage_preset not in (None, matching) and advantage_preset.startswith("trl"):
            raise OptionsError(
                f"advantage_preset={advantage_preset!r} reproduces other TRL settings than "
                f"this GRPOConfig's (scale_rewards={self.args.scale_rewards!r}, "
                f"multi_objective_aggregation={self.args.multi_objective_aggregation!r})",
                hint=f"use advantage_preset={matching!r}, or change the GRPOConfig",
            )
        overrides = dict(advantage_options) if isinstance(advantage_options, Mapping) else {}
        if "reward_weights" in overrides:
            raise OptionsError(
                "reward_weights are TRL's here", hint="set GRPOConfig(reward_weights=...)"
            )
        self._advantage_settings: dict[str, Any] = {
            "preset": advantage_preset,
            "options": None if isinstance(advantage_options, Mapping) else advantage_options,
            **overrides,
        }
        self._rewards_gathered: torch.Tensor | None = None
        k = len(self.reward_funcs)
        self._advantages(torch.zeros(2, k), torch.ones(2, dtype=torch.long), 2)  # checks

    def _advantages(self, rewards: torch.Tensor, lengths: torch.Tensor, size: int) -> Any:
        """The advantages of the gathered ``rewards`` ``(N, K)``, in groups of ``size``."""
        weights = self.reward_weights.tolist()
        found = group_advantages(
            rewards, group_size=size, lengths=lengths, weights=weights, **self._advantage_settings
        )
        return torch.nan_to_num(found, nan=0.0)

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
        self._rewards_gathered = super()._calculate_rewards(*args, **kwargs)
        return self._rewards_gathered

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        output = super()._generate_and_score_completions(inputs)
        rewards, self._rewards_gathered = self._rewards_gathered, None
        assert rewards is not None, "TRL's _calculate_rewards was not called (TRL moved)"
        lengths = self.accelerator.gather(output["completion_mask"].sum(dim=1))
        size = self.num_generations if self.model.training else self.num_generations_eval
        advantages = self._advantages(rewards, lengths, size)
        rows = len(inputs)
        start = self.accelerator.process_index * rows
        output["advantages"] = advantages[start : start + rows]
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):  # TRL logged its own: replace them
            logged.pop()
        logged.extend(advantages.tolist())
        return output

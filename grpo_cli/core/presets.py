"""Trainer presets: option sets that reproduce one trainer's advantage exactly.

Each preset sets every policy; options the user gives explicitly still win. Sources were
read in the trainers' code (file, function, version below); trainers compute in float32 on
fixed-size groups, grpo-adv in float64 on any group sizes, so agreement is to float32
rounding (about 1e-6 relative) and variable groups extend each trainer's formula with its
own NaN-aware statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import polars as pl

FLOAT32_TOL: Final = 1e-5
"""What float32 trainers agree to, relative past 1: ``verify``'s default ``--tol``."""
TRL_SOURCE = (
    "TRL v1.9.0 trl/trainer/grpo_trainer.py _generate_and_score_completions "
    "(weighted nansum, nanmean/nanstd per group of num_generations, + 1e-4, "
    "nan_to_num(nan=0)); trl/trainer/utils.py nanstd (ddof 1)"
)
VERL_SOURCE = "verl 0.9.1 verl/trainer/ppo/core_algos.py"
OPENRLHF_SOURCE = (
    "OpenRLHF v0.11.0 openrlhf/trainer/ppo_utils/experience_maker.py "
    "compute_advantages_and_returns; openrlhf/models/utils.py compute_reward "
    "(clamp to reward_clip_range, default -10 10)"
)


@dataclass(frozen=True)
class Preset:
    """A named option set.

    Attributes:
        name: the ``--preset`` value.
        trainer: trainer and version it reproduces.
        summary: one line: what it computes.
        source: file(s) and function(s) the conventions were read from.
        options: AdvantageOptions fields it sets.
        layout: the trainer's dump layout (``trl``, ``verl``) it can read as is, or None.
        notes: known differences from the trainer, if any.
        fixed_groups: the trainer only knows groups of one size (num_generations).
    """

    name: str
    trainer: str
    summary: str
    source: str
    options: dict[str, Any] = field(default_factory=dict)
    layout: str | None = None
    notes: str = ""
    fixed_groups: bool = False


_TRL_COMMON: Final[dict[str, Any]] = {
    "ddof": 1,
    "eps": 1e-4,
    "eps_mode": "std",
    "nulls": "zero",
    "singleton": "zero",
    "aggregation": "sum_then_normalize",
}
_VERL_COMMON: Final[dict[str, Any]] = {
    "ddof": 1,
    "eps": 1e-6,
    "eps_mode": "std",
    "singleton": "verl",
}
_OPENRLHF_COMMON: Final[dict[str, Any]] = {
    "ddof": 1,
    "eps": 1e-9,
    "eps_mode": "std",
    "clip": (-10.0, 10.0),
    "singleton": "zero",
}

PRESETS: Final[dict[str, Preset]] = {
    p.name: p
    for p in (
        Preset(
            "seed",
            "the reference lessons",
            "(r - mean_g) / (std_g + 1e-8), sample std",
            "the lessons' PyTorch function: rewards.view(B, G), .mean(dim=1), .std(dim=1), + 1e-8",
            {"estimator": "grpo", "ddof": 1, "eps": 1e-8, "eps_mode": "std"},
        ),
        Preset(
            "trl",
            "TRL >= 1.6 GRPOTrainer, scale_rewards='group'",
            "(r - nanmean_g) / (nanstd_g + 1e-4); None rewards excluded, advantage 0",
            TRL_SOURCE,
            {**_TRL_COMMON, "estimator": "grpo"},
            layout="trl",
            notes="A group with one scorable reward gets 0 (nanstd is NaN, then nan_to_num).",
            fixed_groups=True,
        ),
        Preset(
            "trl-batch",
            "TRL >= 1.6 GRPOTrainer, scale_rewards='batch'",
            "(r - nanmean_g) / (nanstd over the batch + 1e-4)",
            TRL_SOURCE,
            {**_TRL_COMMON, "estimator": "batch_std"},
            layout="trl",
            fixed_groups=True,
        ),
        Preset(
            "trl-none",
            "TRL >= 1.6 GRPOTrainer, scale_rewards='none' (Dr. GRPO)",
            "r - nanmean_g",
            TRL_SOURCE,
            {**_TRL_COMMON, "estimator": "dr_grpo"},
            layout="trl",
            fixed_groups=True,
        ),
        Preset(
            "trl-gdpo",
            "TRL >= 1.6 GRPOTrainer, multi_objective_aggregation='normalize_then_sum'",
            "each reward z-scored per group (+ 1e-4), weighted nansum, batch z-score (+ 1e-4)",
            TRL_SOURCE + "; GDPO added in v0.27 (PR #4785)",
            {
                **_TRL_COMMON,
                "estimator": "grpo",
                "aggregation": "normalize_then_sum",
                "singleton": "formula",
            },
            layout="trl",
            fixed_groups=True,
        ),
        Preset(
            "verl",
            "verl 0.9 algorithm.adv_estimator=grpo",
            "(r - mean_g) / (std_g + 1e-6); a one-response group: mean 0, std 1",
            VERL_SOURCE + " compute_grpo_outcome_advantage (epsilon=1e-6, torch.std)",
            {**_VERL_COMMON, "estimator": "grpo"},
            layout="verl",
        ),
        Preset(
            "verl-dr-grpo",
            "verl 0.9 grpo with norm_adv_by_std_in_grpo=False",
            "r - mean_g; a one-response group: mean 0",
            VERL_SOURCE + " compute_grpo_outcome_advantage",
            {**_VERL_COMMON, "estimator": "dr_grpo"},
            layout="verl",
        ),
        Preset(
            "verl-rloo",
            "verl 0.9 adv_estimator=rloo",
            "n/(n-1) (r - mean_g); a one-response group keeps its raw reward",
            VERL_SOURCE + " compute_rloo_outcome_advantage",
            {**_VERL_COMMON, "estimator": "rloo"},
            layout="verl",
        ),
        Preset(
            "verl-reinforce-pp-baseline",
            "verl 0.9 adv_estimator=reinforce_plus_plus_baseline",
            "r - mean_g, then whitened over the batch's tokens: sqrt(var + 1e-8), ddof 1",
            VERL_SOURCE + " compute_reinforce_plus_plus_baseline_outcome_advantage; "
            "verl/utils/torch_functional.py masked_whiten (rsqrt(var + 1e-8), unbiased)",
            {
                **_VERL_COMMON,
                "estimator": "reinforce_pp_baseline",
                "eps": 1e-8,
                "eps_mode": "var",
                "token_weighted": True,
            },
            layout="verl",
            notes="verl's masked_mean divides by (tokens + 1e-8); grpo-adv by the token count "
            "(a 1e-8/N relative difference, below float32 rounding).",
        ),
        Preset(
            "verl-gpg",
            "verl 0.9 adv_estimator=gpg",
            "alpha (r - mean_g), alpha = batch size / non-zero rewards",
            VERL_SOURCE + " compute_gpg_outcome_advantage",
            {**_VERL_COMMON, "estimator": "gpg"},
            layout="verl",
        ),
        Preset(
            "verl-grpo-passk",
            "verl 0.9 adv_estimator=grpo_passk",
            "the unique best of a group: (max - second max) / (std_g + 1e-6); others 0",
            VERL_SOURCE + " compute_grpo_passk_outcome_advantage",
            {**_VERL_COMMON, "estimator": "grpo_passk", "singleton": "null"},
            layout="verl",
            notes="verl raises on a one-response group; grpo-adv gives it a null advantage.",
        ),
        Preset(
            "openrlhf-group-norm",
            "OpenRLHF 0.11 --advantage_estimator group_norm",
            "(r - mean_g) / (std_g + 1e-9), clipped to [-10, 10]",
            OPENRLHF_SOURCE,
            {**_OPENRLHF_COMMON, "estimator": "grpo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-rloo",
            "OpenRLHF 0.11 --advantage_estimator rloo",
            "r - (sum_g - r)/(n - 1), clipped to [-10, 10]",
            OPENRLHF_SOURCE,
            {**_OPENRLHF_COMMON, "estimator": "rloo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-dr-grpo",
            "OpenRLHF 0.11 --advantage_estimator dr_grpo",
            "r - mean_g, clipped to [-10, 10]",
            OPENRLHF_SOURCE,
            {**_OPENRLHF_COMMON, "estimator": "dr_grpo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-reinforce-baseline",
            "OpenRLHF 0.11 --advantage_estimator reinforce_baseline",
            "r - mean_g clipped to [-10, 10], then token-weighted whitening: population "
            "variance floored at 1e-8",
            OPENRLHF_SOURCE + " (whitening: mean over action tokens, rsqrt(var.clamp(min=1e-8)))",
            {
                **_OPENRLHF_COMMON,
                "estimator": "reinforce_pp_baseline",
                "ddof": 0,
                "eps": 1e-8,
                "eps_mode": "var_floor",
                "token_weighted": True,
                "clip_stage": "shaped",
            },
            notes="OpenRLHF clamps the shaped reward r - mean_g before whitening.",
            fixed_groups=True,
        ),
    )
}


PRESET_FIELDS: Final = frozenset(f for p in PRESETS.values() for f in p.options)
"""The option fields some preset sets: how the advantage is computed, not where the log
keeps its columns."""


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (case and separators ignored: ``TRL``, ``verl_rloo``);
    an unknown name suggests the closest and lists the valid ones."""
    from grpo_cli.core.names import match_name

    see = " (grpo-adv presets shows them)"
    return PRESETS[match_name(name, PRESETS, "preset", see=see)]


def siblings(name: str) -> list[str]:
    """The other presets of the trainer ``name`` reproduces (those whose name starts with
    the same word: ``trl`` -> ``trl-batch``, ``trl-none``, ``trl-gdpo``), in table order."""
    family = get_preset(name).name.split("-")[0]
    return [p for p in PRESETS if p.split("-")[0] == family and p != get_preset(name).name]


def merge_options(preset: str | None, explicit: dict[str, Any]) -> dict[str, Any]:
    """Option fields from ``preset``, overridden by the ``explicit`` ones."""
    base = dict(get_preset(preset).options) if preset else {}
    base.update(explicit)
    return base


def presets_frame() -> pl.DataFrame:
    """Every preset's conventions side by side (for ``grpo-adv presets`` and the README)."""
    import polars as pl

    from grpo_cli.core.options import AdvantageOptions

    rows = []
    for preset in PRESETS.values():
        o = AdvantageOptions(**{**preset.options, "length_col": "length"})
        clip = "" if o.clip is None else f"[{o.clip[0]:g}, {o.clip[1]:g}] ({o.clip_stage})"
        rows.append(
            {
                "preset": preset.name,
                "reproduces": preset.trainer,
                "estimator": o.estimator,
                "ddof": o.ddof,
                "eps": f"{o.eps:g} ({o.eps_mode})",
                "singleton": o.singleton,
                "nulls": o.nulls,
                "clip": clip,
                "token_weighted": o.token_weighted,
                "aggregation": o.aggregation,
                "layout": preset.layout or "",
                "source": preset.source,
            }
        )
    return pl.DataFrame(rows)

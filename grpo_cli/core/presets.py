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


@dataclass(frozen=True)
class Preset:
    """A named option set.

    Attributes:
        name: the ``--preset`` value.
        trainer: the trainer it reproduces (``TRL``, ``NeMo-RL``...); its presets are
            siblings.
        version: the trainer's version or commit the conventions were read at.
        file: the trainer's file(s) and function(s) they were read in.
        setting: the trainer's configuration this preset reproduces.
        options: AdvantageOptions fields it sets.
        layout: the trainer's dump layout (``trl``, ``verl``) it can read as is, or None.
        notes: known differences from the trainer, if any.
        fixed_groups: the trainer only knows groups of one size (num_generations).
        sort_rewards: the trainer takes its reward columns in sorted name order, and its
            weights in that order (NeMo-RL's GDPO): the resolver sorts ``reward_cols``.
    """

    name: str
    trainer: str
    version: str
    file: str
    setting: str
    options: dict[str, Any] = field(default_factory=dict)
    layout: str | None = None
    notes: str = ""
    fixed_groups: bool = False
    sort_rewards: bool = False


TRL_FILE = (
    "trl/trainer/grpo_trainer.py _generate_and_score_completions (weighted nansum, "
    "nanmean/nanstd per group, + 1e-4, nan_to_num(nan=0)); trl/trainer/utils.py nanstd"
)
VERL_FILE = "verl/trainer/ppo/core_algos.py "
OPENRLHF_FILE = (
    "openrlhf/trainer/ppo_utils/experience_maker.py compute_advantages_and_returns; "
    "openrlhf/models/utils.py compute_reward (clamp to reward.clip_range, default -10 10)"
)
OPENRLHF_WHITEN = " (whitening: mean over action tokens, rsqrt(var.clamp(min=1e-8)))"
NEMO = ("NeMo-RL", "v0.7.0 @7ea279ab")
NEMO_FILE = (
    "nemo_rl/algorithms/advantage_estimator.py {}; "
    "nemo_rl/algorithms/utils.py calculate_baseline_and_std_per_prompt"
)
AREAL = ("AReaL", "v1.0.4 @4aef98d8")
AREAL_FILE = (
    "areal/trainer/ppo/actor.py PPOActor._compute_advantages; areal/utils/data.py "
    "Normalization (float64)"
)
AREAL_NOTES = (
    "Rewards as the trainer saw them: AReaL's examples scale them first (reward_scaling 10, "
    "reward_bias -0.5), before the clip to +-20; the preset takes scaling 1 and bias 0. "
    "Rows after AReaL's last full group slice (mean 0, std 0) are left out."
)
SLIME = ("slime", "v0.3.1 @624b824a", "slime/ray/rollout.py _post_process_rewards")
SLIME_NOTES = (
    "slime makes the whole batch one group when the sample count is not "
    "n_samples_per_prompt x rollout_batch_size: a log cannot show that, left out."
)
SKYRL = ("SkyRL", "@a9564572")
SKYRL_FILE = "skyrl/backends/skyrl_train/utils/ppo_utils.py "
ROLL = ("ROLL", "v0.3.0 @8eb27cc2")
ROLL_FILE = "roll/utils/functionals.py reward_norm"
ROLL_NOTES = "ROLL gives a one-response group NaN (torch.std of one value): grpo-adv null."
PRIME = ("prime-rl", "@559b4477")
OPEN_INSTRUCT = ("open-instruct", "@e6c3044a", "open_instruct/data_loader.py (advantages)")

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
_OPENRLHF_WHITENING: Final[dict[str, Any]] = {
    **_OPENRLHF_COMMON,
    "ddof": 0,
    "eps": 1e-8,
    "eps_mode": "var_floor",
    "token_weighted": True,
    "clip_stage": "shaped",
}
_NEMO_GRPO: Final[dict[str, Any]] = {
    "estimator": "loo_grpo",
    "ddof": 1,
    "eps": 1e-6,
    "eps_mode": "positive_std",
    "singleton": "zero",
}
_AREAL_COMMON: Final[dict[str, Any]] = {
    "reward_clip": (-20.0, 20.0),
    "ddof": 1,
    "eps": 1e-5,
    "eps_mode": "std",
    "singleton": "zero",
}
_AREAL_ADV_NORM: Final[dict[str, Any]] = {
    **_AREAL_COMMON,
    "whiten": True,
    "whiten_ddof": 1,
    "whiten_eps": 1e-5,
    "whiten_eps_mode": "std",
    "token_weighted": True,
}
_MASKED_WHITEN: Final[dict[str, Any]] = {  # verl, ROLL, SkyRL masked_whiten
    "whiten": True,
    "whiten_ddof": 1,
    "whiten_eps": 1e-8,
    "whiten_eps_mode": "var",
    "token_weighted": True,
}
_GROUP_STD_1E6: Final[dict[str, Any]] = {"ddof": 1, "eps": 1e-6, "eps_mode": "std"}

PRESETS: Final[dict[str, Preset]] = {
    p.name: p
    for p in (
        Preset(
            "seed",
            "the lessons",
            "(reference)",
            "the lessons' PyTorch function",
            "rewards.view(B, G), .mean(dim=1), .std(dim=1), + 1e-8",
            {"estimator": "grpo", "ddof": 1, "eps": 1e-8, "eps_mode": "std"},
        ),
        Preset(
            "trl",
            "TRL",
            "v1.9.0 (>= 1.6)",
            TRL_FILE,
            "GRPOTrainer, scale_rewards='group'",
            {**_TRL_COMMON, "estimator": "grpo"},
            layout="trl",
            notes="A group with one scorable reward gets 0 (nanstd is NaN, then nan_to_num).",
            fixed_groups=True,
        ),
        Preset(
            "trl-batch",
            "TRL",
            "v1.9.0 (>= 1.6)",
            TRL_FILE,
            "GRPOTrainer, scale_rewards='batch'",
            {**_TRL_COMMON, "estimator": "batch_std"},
            layout="trl",
            fixed_groups=True,
        ),
        Preset(
            "trl-none",
            "TRL",
            "v1.9.0 (>= 1.6)",
            TRL_FILE,
            "GRPOTrainer, scale_rewards='none' (Dr. GRPO)",
            {**_TRL_COMMON, "estimator": "dr_grpo"},
            layout="trl",
            fixed_groups=True,
        ),
        Preset(
            "trl-gdpo",
            "TRL",
            "v1.9.0 (GDPO since v0.27, PR #4785)",
            TRL_FILE,
            "GRPOTrainer, multi_objective_aggregation='normalize_then_sum'",
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
            "verl",
            "0.9.1",
            VERL_FILE + "compute_grpo_outcome_advantage (epsilon=1e-6, torch.std)",
            "algorithm.adv_estimator=grpo (also grpo_vectorized)",
            {**_VERL_COMMON, "estimator": "grpo"},
            layout="verl",
        ),
        Preset(
            "verl-dr-grpo",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_grpo_outcome_advantage",
            "adv_estimator=grpo, norm_adv_by_std_in_grpo=False",
            {**_VERL_COMMON, "estimator": "dr_grpo"},
            layout="verl",
            notes="grpo_vectorized ignores norm_adv_by_std_in_grpo (the trainer never passes "
            "it): it always divides by the std, as the verl preset.",
        ),
        Preset(
            "verl-rloo",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_rloo_outcome_advantage",
            "adv_estimator=rloo",
            {**_VERL_COMMON, "estimator": "rloo"},
            layout="verl",
        ),
        Preset(
            "verl-rloo-vectorized",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_rloo_vectorized_outcome_advantage",
            "adv_estimator=rloo_vectorized",
            {**_VERL_COMMON, "estimator": "rloo", "singleton": "zero"},
            layout="verl",
            notes="A one-response group gives 0, where rloo keeps its score.",
        ),
        Preset(
            "verl-reinforce-pp-baseline",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_reinforce_plus_plus_baseline_outcome_advantage; "
            "verl/utils/torch_functional.py masked_whiten (rsqrt(var + 1e-8), unbiased)",
            "adv_estimator=reinforce_plus_plus_baseline",
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
            "verl",
            "0.9.1",
            VERL_FILE + "compute_gpg_outcome_advantage",
            "adv_estimator=gpg",
            {**_VERL_COMMON, "estimator": "gpg"},
            layout="verl",
        ),
        Preset(
            "verl-grpo-passk",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_grpo_passk_outcome_advantage",
            "adv_estimator=grpo_passk",
            {**_VERL_COMMON, "estimator": "grpo_passk", "singleton": "null"},
            layout="verl",
            notes="verl raises on a one-response group; grpo-adv gives it a null advantage.",
        ),
        Preset(
            "verl-gdpo",
            "verl",
            "0.9.1",
            VERL_FILE + "compute_gdpo_outcome_advantage; verl/utils/torch_functional.py "
            "masked_whiten",
            "adv_estimator=gdpo, gdpo_reward_keys, gdpo_reward_weights",
            {
                **_VERL_COMMON,
                **_MASKED_WHITEN,
                "estimator": "grpo",
                "aggregation": "normalize_then_sum",
            },
            layout="verl",
            notes="Per reward column verl's grpo, always divided by the std (the trainer never "
            "passes norm_adv_by_std_in_grpo); weights in the order of the reward columns.",
        ),
        Preset(
            "openrlhf-group-norm",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE,
            "algo.advantage.estimator=group_norm",
            {**_OPENRLHF_COMMON, "estimator": "grpo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-rloo",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE,
            "algo.advantage.estimator=rloo",
            {**_OPENRLHF_COMMON, "estimator": "rloo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-dr-grpo",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE,
            "algo.advantage.estimator=dr_grpo",
            {**_OPENRLHF_COMMON, "estimator": "dr_grpo"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-reinforce-baseline",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE + OPENRLHF_WHITEN,
            "algo.advantage.estimator=reinforce_baseline",
            {**_OPENRLHF_WHITENING, "estimator": "reinforce_pp_baseline"},
            notes="OpenRLHF clamps the shaped reward r - mean_g before whitening.",
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-reinforce-baseline-no-std",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE + OPENRLHF_WHITEN,
            "algo.advantage.estimator=reinforce_baseline, algo.advantage.no_std_norm=true",
            {**_OPENRLHF_WHITENING, "estimator": "reinforce_pp_baseline", "eps_mode": "center"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-reinforce",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE + OPENRLHF_WHITEN,
            "algo.advantage.estimator=reinforce (gamma 1)",
            {**_OPENRLHF_WHITENING, "estimator": "reinforce_pp"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-reinforce-no-std",
            "OpenRLHF",
            "v0.11.0",
            OPENRLHF_FILE + OPENRLHF_WHITEN,
            "algo.advantage.estimator=reinforce, algo.advantage.no_std_norm=true",
            {**_OPENRLHF_WHITENING, "estimator": "reinforce_pp", "eps_mode": "center"},
            fixed_groups=True,
        ),
        Preset(
            "openrlhf-flash-reinforce",
            "OpenRLHF",
            "0.11.2",
            OPENRLHF_FILE,
            "algo.advantage.estimator=flash_reinforce",
            {**_OPENRLHF_COMMON, "estimator": "batch_baseline"},
            fixed_groups=True,
        ),
        Preset(
            "nemo-rl",
            *NEMO,
            NEMO_FILE.format("GRPOAdvantageEstimator"),
            "grpo.adv_estimator.name=grpo, use_leave_one_out_baseline=true, "
            "normalize_rewards=true (the defaults)",
            _NEMO_GRPO,
            notes="NeMo-RL's float32 E[x^2]-E[x]^2 leaves a residue on equal rewards that are "
            "not dyadic; grpo-adv gives such groups exactly 0.",
        ),
        Preset(
            "nemo-rl-no-loo",
            *NEMO,
            NEMO_FILE.format("GRPOAdvantageEstimator"),
            "use_leave_one_out_baseline=false",
            {**_NEMO_GRPO, "estimator": "grpo"},
        ),
        Preset(
            "nemo-rl-no-std",
            *NEMO,
            NEMO_FILE.format("GRPOAdvantageEstimator"),
            "normalize_rewards=false",
            {**_NEMO_GRPO, "estimator": "rloo"},
        ),
        Preset(
            "nemo-rl-gdpo",
            *NEMO,
            NEMO_FILE.format("GDPOAdvantageEstimator")
            + "; get_gdpo_reward_component_keys (sorted)",
            "grpo.adv_estimator.name=gdpo, reward_weights",
            {
                **_NEMO_GRPO,
                "aggregation": "normalize_then_sum",
                "whiten": True,
                "whiten_ddof": 1,
                "whiten_eps": 0.0,
                "whiten_eps_mode": "positive_std",
                "singleton": "formula",  # r - r = 0, then the batch z-score
            },
            notes="The reward columns are taken in sorted name order, as NeMo-RL sorts its "
            "reward/<name> keys: the weights apply in that order.",
            sort_rewards=True,
        ),
        Preset(
            "nemo-rl-reinforce-pp",
            *NEMO,
            NEMO_FILE.format("ReinforcePlusPlusAdvantageEstimator"),
            "grpo.adv_estimator.name=reinforce_plus_plus, minus_baseline=true, no KL",
            {
                "estimator": "reinforce_pp_baseline",
                "ddof": 0,
                "eps": 1e-8,
                "eps_mode": "var_floor",
                "singleton": "formula",  # r - r = 0, then whitened
                "token_weighted": True,
            },
        ),
        Preset(
            "areal",
            *AREAL,
            AREAL_FILE,
            "examples/math/gsm8k_grpo.yaml: reward_norm group/group, adv_norm batch/batch",
            {**_AREAL_ADV_NORM, "estimator": "grpo"},
            notes=AREAL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "areal-no-adv-norm",
            *AREAL,
            AREAL_FILE,
            "gsm8k_grpo.yaml without adv_norm",
            {**_AREAL_COMMON, "estimator": "grpo"},
            notes=AREAL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "areal-dr-grpo",
            *AREAL,
            AREAL_FILE,
            "gsm8k_drgrpo.yaml: reward_norm mean group, no std; adv_norm batch/batch",
            {**_AREAL_ADV_NORM, "estimator": "dr_grpo"},
            notes=AREAL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "areal-rloo",
            *AREAL,
            AREAL_FILE,
            "gsm8k_rloo.yaml: reward_norm mean group with mean_leave1out, no std; adv_norm "
            "batch/batch",
            {**_AREAL_ADV_NORM, "estimator": "rloo", "singleton": "verl"},  # r, then adv_norm
            notes=AREAL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "areal-reinforce",
            *AREAL,
            AREAL_FILE,
            "gsm8k_reinforce.yaml: no reward_norm; adv_norm batch/batch",
            {**_AREAL_COMMON, "estimator": "reinforce_pp", "token_weighted": True},
            notes=AREAL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "slime",
            *SLIME,
            "advantage_estimator=grpo",
            {**_GROUP_STD_1E6, "estimator": "grpo", "singleton": "zero"},
            notes=SLIME_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "slime-no-std",
            *SLIME,
            "advantage_estimator=grpo, disable_grpo_std_normalization=true",
            {**_GROUP_STD_1E6, "estimator": "dr_grpo", "singleton": "zero"},
            notes=SLIME_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "skyrl",
            *SKYRL,
            SKYRL_FILE + "compute_grpo_outcome_advantage",
            "advantage_estimator=grpo, grpo_norm_by_std=true",
            {**_GROUP_STD_1E6, "estimator": "grpo", "singleton": "verl"},
        ),
        Preset(
            "skyrl-no-std",
            *SKYRL,
            SKYRL_FILE + "compute_grpo_outcome_advantage",
            "advantage_estimator=grpo, grpo_norm_by_std=false",
            {**_GROUP_STD_1E6, "estimator": "dr_grpo", "singleton": "verl"},
        ),
        Preset(
            "skyrl-rloo",
            *SKYRL,
            SKYRL_FILE + "compute_rloo_outcome_advantage",
            "advantage_estimator=rloo",
            {**_GROUP_STD_1E6, "estimator": "rloo", "singleton": "zero"},
        ),
        Preset(
            "skyrl-maxrl",
            *SKYRL,
            SKYRL_FILE + "compute_maxrl_advantage",
            "advantage_estimator=maxrl",
            {**_GROUP_STD_1E6, "estimator": "maxrl", "singleton": "raw"},
        ),
        Preset(
            "skyrl-reinforce-pp",
            *SKYRL,
            SKYRL_FILE + "compute_reinforce_plus_plus_outcome_advantage, masked_whiten",
            "advantage_estimator=reinforce++ (gamma 1)",
            {
                "estimator": "reinforce_pp",
                "ddof": 1,
                "eps": 1e-8,
                "eps_mode": "var",
                "singleton": "zero",
                "token_weighted": True,
            },
        ),
        Preset(
            "roll",
            *ROLL,
            ROLL_FILE,
            "adv_estimator=grpo (forces norm_mean_type and norm_std_type group)",
            {**_GROUP_STD_1E6, "estimator": "grpo", "singleton": "null"},
            notes=ROLL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "roll-whiten",
            *ROLL,
            ROLL_FILE + ", compute_advantage (masked_whiten)",
            "adv_estimator=grpo, whiten_advantages=true",
            {**_GROUP_STD_1E6, **_MASKED_WHITEN, "estimator": "grpo", "singleton": "null"},
            notes=ROLL_NOTES,
            fixed_groups=True,
        ),
        Preset(
            "prime-rl",
            *PRIME,
            "src/prime_rl/orchestrator/algo/grpo.py GRPOAlgorithm.score_group",
            "algo grpo, no length penalty",
            {"estimator": "dr_grpo", "singleton": "zero"},
        ),
        Preset(
            "prime-rl-max-rl",
            *PRIME,
            "src/prime_rl/orchestrator/algo/max_rl.py MaxRLAlgorithm.score_group",
            "algo max_rl",
            {"estimator": "maxrl_positive", "singleton": "zero"},
        ),
        Preset(
            "open-instruct",
            *OPEN_INSTRUCT,
            "advantage_normalization_type=centered (the default)",
            {"estimator": "dr_grpo", "singleton": "zero"},
            fixed_groups=True,
        ),
        Preset(
            "open-instruct-standard",
            *OPEN_INSTRUCT,
            "advantage_normalization_type=standard",
            {"estimator": "grpo", "ddof": 0, "eps": 1e-8, "eps_mode": "std", "singleton": "zero"},
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
    """The other presets of the trainer ``name`` reproduces (``trl`` -> ``trl-batch``,
    ``trl-none``, ``trl-gdpo``), in table order."""
    chosen = get_preset(name)
    return [p.name for p in PRESETS.values() if p.trainer == chosen.trainer and p != chosen]


def merge_options(preset: str | None, explicit: dict[str, Any]) -> dict[str, Any]:
    """Option fields from ``preset``, overridden by the ``explicit`` ones."""
    base = dict(get_preset(preset).options) if preset else {}
    base.update(explicit)
    return base


def presets_frame() -> pl.DataFrame:
    """Every preset's trainer, source and conventions side by side, grouped by trainer (for
    ``grpo-adv presets`` and the README). ``clip``: the reward clip before any statistic
    (``reward``) and the clip of the value (``advantage`` or ``shaped``); ``whiten``: the
    batch whitening after the formula, as ddof and eps (mode)."""
    import polars as pl

    from grpo_cli.core.options import AdvantageOptions

    rows = []
    for preset in PRESETS.values():
        o = AdvantageOptions(**{**preset.options, "length_col": "length"})
        clips = [(o.reward_clip, "reward"), (o.clip, o.clip_stage)]
        clip = "; ".join(f"[{c[0]:g}, {c[1]:g}] ({stage})" for c, stage in clips if c)
        whiten = f"ddof {o.whiten_ddof}, {o.whiten_eps:g} ({o.whiten_eps_mode})"
        rows.append(
            {
                "trainer": preset.trainer,
                "preset": preset.name,
                "version": preset.version,
                "setting": preset.setting,
                "estimator": o.estimator,
                "ddof": o.ddof,
                "eps": f"{o.eps:g} ({o.eps_mode})",
                "singleton": o.singleton,
                "nulls": o.nulls,
                "clip": clip,
                "whiten": whiten if o.whiten else "",
                "token_weighted": o.token_weighted,
                "aggregation": o.aggregation,
                "layout": preset.layout or "",
                "file": preset.file,
            }
        )
    return pl.DataFrame(rows)

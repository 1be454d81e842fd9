"""Every estimator and every policy, with values computed by hand in the test, and
properties per estimator."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_cli import ESTIMATORS, compute_advantages
from grpo_cli.core.errors import InputError, OptionsError

EPS = 1e-8
# Group a: rewards 1, 0, 0.5 (lengths 10, 20, 30); group b: 2, 2 (a tie, zero variance).
LOG = pl.DataFrame(
    {
        "step": [1, 1, 1, 2, 2],
        "prompt_id": ["a", "a", "a", "b", "b"],
        "reward": [1.0, 0.0, 0.5, 2.0, 2.0],
        "length": [10, 20, 30, 1, 1],
        "greedy": [0.5, 0.5, 0.5, 1.0, 1.0],
    }
)
BATCH_STD = math.sqrt(((1 - 1.1) ** 2 + 1.1**2 + 0.6**2 + 0.9**2 + 0.9**2) / 4)  # sqrt(0.8)


def adv(frame: pl.DataFrame = LOG, **options: object) -> list[float | None]:
    return compute_advantages(frame, **options)["advantage"].to_list()  # type: ignore[arg-type]


HAND = {
    "grpo": [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0, 0.0],
    "dr_grpo": [0.5, -0.5, 0.0, 0.0, 0.0],
    "batch_std": [0.5 / (BATCH_STD + EPS), -0.5 / (BATCH_STD + EPS), 0.0, 0.0, 0.0],
    "rloo": [1 - 0.5 / 2, 0 - 1.5 / 2, 0.5 - 1 / 2, 0.0, 0.0],
    "reinforce_pp_baseline": [x / (math.sqrt(0.5 / 4) + EPS) for x in (0.5, -0.5, 0.0, 0.0, 0.0)],
    "reinforce_pp": [(r - 1.1) / (BATCH_STD + EPS) for r in (1.0, 0.0, 0.5, 2.0, 2.0)],
    "opo": [1 - 25 / 60, -25 / 60, 0.5 - 25 / 60, 0.0, 0.0],
    "gpg": [1.25 * 0.5, 1.25 * -0.5, 0.0, 0.0, 0.0],  # alpha = 5 rewards / 4 non-zero
    "grpo_passk": [0.5 / (0.5 + EPS), 0.0, 0.0, 0.0, 0.0],  # b is a tie: 0
    "remax": [0.5, -0.5, 0.0, 1.0, 1.0],
    # a's others: (0, 0.5) and (1, 0.5) mean 0.25 / 0.75, std sqrt(0.125); (1, 0) mean 0.5
    "loo_grpo": [0.75 / (math.sqrt(0.125) + EPS), -0.75 / (math.sqrt(0.125) + EPS), 0.0, 0.0, 0.0],
    "maxrl": [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0, 0.0],
    "maxrl_positive": [1.0, -1.0, 0.0, 0.0, 0.0],
    "batch_baseline": [-0.1, -1.1, -0.6, 0.9, 0.9],  # mean_b = 1.1
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_estimator_by_hand(name: str) -> None:
    got = adv(estimator=name, length_col="length", baseline_col="greedy")
    assert got == pytest.approx(HAND[name], rel=1e-14, abs=1e-15)


def test_every_estimator_has_a_hand_computed_case() -> None:
    assert set(HAND) | {"process"} == set(ESTIMATORS)
    for estimator in ESTIMATORS.values():
        assert estimator.source and estimator.fn.__doc__


def test_process_supervision_by_hand() -> None:
    log = pl.DataFrame(
        {"prompt_id": ["a", "a", "b"], "steps": [[1.0, 0.0], [0.0, 1.0, 1.0], [0.5]]},
    )
    got = compute_advantages(log, estimator="process", step_rewards_col="steps", eps=0.0)
    # Group a's five step rewards: mean 0.6, std sqrt(0.3) (ddof 1).
    z1, z0 = 0.4 / math.sqrt(0.3), -0.6 / math.sqrt(0.3)
    rows = got["advantage"].to_list()
    assert rows[0] == pytest.approx([z1 + z0, z0])
    assert rows[1] == pytest.approx([z0 + z1 + z1, z1 + z1, z1])
    assert rows[2] == [0.0]  # a singleton group (one step reward): zero
    assert got.schema["advantage"] == pl.List(pl.Float64)


def test_process_keeps_empty_and_null_lists() -> None:
    log = pl.DataFrame(
        {"prompt_id": ["a", "a", "a", "a"], "steps": [[1.0, None], [], None, [0.0]]},
        schema={"prompt_id": pl.String, "steps": pl.List(pl.Float64)},
    )
    got = compute_advantages(log, estimator="process", step_rewards_col="steps", eps=0.0)
    rows = got["advantage"].to_list()
    # Valid step rewards 1 and 0: mean 0.5, std sqrt(0.5); the null step is left out.
    assert rows[0][0] == pytest.approx(0.5 / math.sqrt(0.5))
    assert rows[0][1] is None
    assert rows[1] == []
    assert rows[2] is None
    assert rows[3] == pytest.approx([-0.5 / math.sqrt(0.5)])


class TestEpsMode:
    def test_std_var_and_floor(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g", "g"], "reward": [0.0, 1.0]})
        assert adv(log, eps=0.1)[1] == pytest.approx(0.5 / (math.sqrt(0.5) + 0.1))
        assert adv(log, eps=0.1, eps_mode="var")[1] == pytest.approx(0.5 / math.sqrt(0.6))
        assert adv(log, eps=1.0, eps_mode="var_floor")[1] == pytest.approx(0.5)
        assert adv(log, eps=0.1, eps_mode="var_floor")[1] == pytest.approx(0.5 / math.sqrt(0.5))


class TestSingletonPolicies:
    log = pl.DataFrame({"prompt_id": ["s", "g", "g"], "reward": [0.7, 0.0, 1.0]})

    def test_drop_removes_the_row(self) -> None:
        got = compute_advantages(self.log, singleton="drop")
        assert got["prompt_id"].to_list() == ["g", "g"]

    def test_verl_divides_by_one_plus_eps(self) -> None:
        assert adv(self.log, singleton="verl", eps=1e-6)[0] == pytest.approx(0.7 / (1 + 1e-6))

    def test_verl_rloo_keeps_the_raw_reward(self) -> None:
        assert adv(self.log, singleton="verl", estimator="rloo")[0] == 0.7

    def test_formula_is_undefined_with_ddof1(self) -> None:
        assert adv(self.log, singleton="formula")[0] is None
        assert adv(self.log, singleton="formula", ddof=0)[0] == 0.0

    def test_batch_estimators_ignore_groups(self) -> None:
        got = adv(self.log, estimator="reinforce_pp", singleton="zero", eps=0.0)
        mean = (0.7 + 0 + 1) / 3
        std = math.sqrt(((0.7 - mean) ** 2 + mean**2 + (1 - mean) ** 2) / 2)
        assert got[0] == pytest.approx((0.7 - mean) / std)


class TestNullPolicies:
    log = pl.DataFrame({"prompt_id": ["g"] * 3, "reward": [1.0, None, 0.0]})

    def test_exclude(self) -> None:
        assert adv(self.log, eps=0.0) == pytest.approx([1 / math.sqrt(2), None, -1 / math.sqrt(2)])

    def test_zero_advantage(self) -> None:
        assert adv(self.log, nulls="zero", eps=0.0) == pytest.approx(
            [1 / math.sqrt(2), 0.0, -1 / math.sqrt(2)]
        )

    def test_fill_zero_counts_the_reward_as_zero(self) -> None:
        mean, std = 1 / 3, math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
        assert adv(self.log, nulls="fill_zero", eps=0.0) == pytest.approx(
            [(1 - mean) / std, -mean / std, -mean / std]
        )

    def test_error(self) -> None:
        with pytest.raises(InputError) as info:
            compute_advantages(self.log, nulls="error")
        assert info.value.message == '1 row(s) have a null or NaN reward (nulls="error")'


class TestClipAndBatches:
    def test_clip(self) -> None:
        assert adv(estimator="dr_grpo", clip=(-0.25, 0.25)) == [0.25, -0.25, 0.0, 0.0, 0.0]

    def test_clip_stage_shaped_clips_before_whitening(self) -> None:
        shaped = adv(estimator="reinforce_pp_baseline", clip=(-0.25, 0.25), clip_stage="shaped")
        # x = 0.5, -0.5, 0, 0, 0 clipped to 0.25, -0.25, 0, 0, 0; mean 0, var (2/16)/4.
        std = math.sqrt(0.125 / 4)
        assert shaped == pytest.approx([0.25 / (std + EPS), -0.25 / (std + EPS), 0, 0, 0])
        final = adv(estimator="reinforce_pp_baseline", clip=(-0.25, 0.25))
        assert final == [0.25, -0.25, 0.0, 0.0, 0.0]

    def test_batch_col_gives_per_batch_statistics(self) -> None:
        got = adv(estimator="reinforce_pp", batch_col="step", eps=0.0)
        # Step 1: 1, 0, 0.5 (mean 0.5, std 0.5); step 2: 2, 2 (a flat batch: exactly 0).
        assert got == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0])

    def test_token_weighted_batch_statistics(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", "b"], "reward": [1.0, 0.0], "length": [1, 3]})
        got = adv(log, estimator="reinforce_pp", length_col="length", token_weighted=True, eps=0.0)
        mean = (1 * 1.0 + 3 * 0.0) / 4  # over 4 tokens
        var = (1 * (1.0 - mean) ** 2 + 3 * (0.0 - mean) ** 2) / (4 - 1)
        assert got == pytest.approx([(1.0 - mean) / math.sqrt(var), -mean / math.sqrt(var)])


class TestRewards:
    def test_weighted_sum_then_normalize(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 3, "r1": [1.0, 0.0, 0.0], "r2": [0.0, 1.0, 0.0]})
        got = adv(log, reward_cols=("r1", "r2"), reward_weights=(1.0, 0.5), eps=0.0)
        summed = pl.DataFrame({"prompt_id": ["g"] * 3, "reward": [1.0, 0.5, 0.0]})
        assert got == pytest.approx(adv(summed, eps=0.0))

    def test_normalize_then_sum_by_hand(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 2, "r1": [1.0, 0.0], "r2": [0.0, 2.0]})
        got = adv(
            log,
            reward_cols=("r1", "r2"),
            reward_weights=(1.0, 0.5),
            aggregation="normalize_then_sum",
            eps=0.0,
        )
        # z1 = +-0.5/sqrt(0.5) = +-0.7071; z2 = -+1/sqrt(2) = -+0.7071;
        # s = z1 + 0.5 z2 = +-0.35355; batch z-score (mean 0, std 0.5): +-0.7071.
        z1 = 0.5 / math.sqrt(0.5)
        s = z1 - 0.5 * (1.0 / math.sqrt(2.0))
        std = math.sqrt(2 * s**2 / 1)
        assert got == pytest.approx([s / std, -s / std])
        assert got[0] == pytest.approx(1 / math.sqrt(2))

    def test_weights_must_match(self) -> None:
        with pytest.raises(OptionsError) as info:
            compute_advantages(LOG, reward_weights=(1.0, 2.0))
        assert info.value.message == "2 reward weight(s) for 1 reward column(s): reward"


class TestTrainerCases:
    """Groups [1, 0, 0, 1] and [0, 0, 1, 1]: every response sits at +-1 around the mean 0.5."""

    log = pl.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 4, "reward": [1.0, 0, 0, 1, 0, 0, 1, 1]})
    signs = (1, -1, -1, 1, -1, -1, 1, 1)

    def check(self, value: float, **options: object) -> None:
        got = adv(self.log, **options)
        assert got == pytest.approx([sign * value for sign in self.signs], rel=1e-14)

    def test_nemo_rl_leave_one_out(self) -> None:
        # a 1's others (0, 0, 1): r - b = 2/3, std sqrt(1/3) (ddof 1)
        value = (2 / 3) / (math.sqrt(1 / 3) + 1e-6)
        assert value == pytest.approx(1.154699, abs=1e-6)
        self.check(value, estimator="loo_grpo", eps=1e-6, eps_mode="positive_std")

    def test_skyrl_maxrl(self) -> None:
        value = 0.5 / (0.5 + 1e-6)
        assert value == pytest.approx(0.999998, abs=1e-6)
        self.check(value, estimator="maxrl", eps=1e-6)

    def test_areal_group_then_batch_normaliser(self) -> None:
        c = 0.5 / (math.sqrt(1 / 3) + 1e-5)  # the group z-score, then 8 values +-c
        value = c / (c * math.sqrt(8 / 7) + 1e-5)  # batch std ddof 1: c sqrt(8/7)
        assert value == pytest.approx(0.935404, abs=1e-6)
        self.check(value, eps=1e-5, whiten=True, whiten_eps=1e-5, whiten_eps_mode="std")

    def test_open_instruct_standard(self) -> None:
        value = 0.5 / (0.5 + 1e-8)
        assert value == pytest.approx(1.0, abs=1e-6)
        self.check(value, ddof=0, eps=1e-8)

    def test_prime_rl_max_rl(self) -> None:
        self.check(1.0, estimator="maxrl_positive")


class TestNewEstimators:
    def test_loo_grpo_pair_and_odd_one_out(self) -> None:
        """A pair's leave-one-out std is undefined (ddof 1): under positive_std it is r - b
        undivided; a response whose others are all equal is not divided either."""
        log = pl.DataFrame({"prompt_id": ["p", "p", "q", "q", "q"], "reward": [0.0, 1.0, 1, 0, 0]})
        got = adv(log, estimator="loo_grpo", eps_mode="positive_std", eps=1e-6)
        # q: the 1's others (0, 0): var 0 -> 1 - 0; a 0's others (1, 0): b 0.5, std sqrt(0.5)
        zero = -0.5 / (math.sqrt(0.5) + 1e-6)
        assert got == pytest.approx([-1.0, 1.0, 1.0, zero, zero], rel=1e-14)
        # under std the pair's undefined std gives a null advantage (the formula's)
        assert adv(log, estimator="loo_grpo", singleton="formula")[:2] == [None, None]

    def test_loo_grpo_singleton_and_verl(self) -> None:
        log = pl.DataFrame({"prompt_id": ["s", "g", "g", "g"], "reward": [0.7, 0.0, 1.0, 1.0]})
        assert adv(log, estimator="loo_grpo")[0] == 0.0
        verl = adv(log, estimator="loo_grpo", singleton="verl", eps=1e-6)[0]
        assert verl == pytest.approx(0.7 / (1 + 1e-6))

    def test_maxrl_positive_leaves_a_non_positive_mean_at_zero(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 3, "reward": [-1.0, 0.0, 1.0]})
        assert adv(log, estimator="maxrl_positive") == [0.0, 0.0, 0.0]
        assert adv(log, estimator="maxrl", eps=0.5) == pytest.approx([-2.0, 0.0, 2.0])

    def test_batch_baseline_per_batch_and_flat(self) -> None:
        got = adv(estimator="batch_baseline", batch_col="step")
        assert got == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0])


class TestEpsModesAndWhiten:
    def test_positive_std_divides_only_where_var_is_positive(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g", "g"], "reward": [0.0, 1.0]})
        assert adv(log, eps=0.1, eps_mode="positive_std")[1] == pytest.approx(
            0.5 / (math.sqrt(0.5) + 0.1)
        )
        # as the whiten eps mode: rloo's x = -1, 1 has batch var 2 > 0, so it is divided
        got = adv(
            log, estimator="rloo", whiten=True, whiten_eps=0.0, whiten_eps_mode="positive_std"
        )
        assert got == pytest.approx([-1.0 / math.sqrt(2.0), 1.0 / math.sqrt(2.0)], rel=1e-14)

    def test_center_only_centres(self) -> None:
        got = adv(estimator="reinforce_pp", eps_mode="center")
        assert got == pytest.approx([r - 1.1 for r in (1.0, 0.0, 0.5, 2.0, 2.0)])
        whitened = adv(estimator="dr_grpo", whiten=True, whiten_eps_mode="center")
        assert whitened == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.0])  # mean_b of x is 0

    def test_whiten_uses_its_own_ddof_and_eps(self) -> None:
        # dr_grpo's x = 0.5, -0.5, 0, 0, 0: mean 0, sum of squares 0.5
        got = adv(estimator="dr_grpo", whiten=True, whiten_ddof=0, whiten_eps=0.0)
        std = math.sqrt(0.5 / 5)
        assert got == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0, 0.0])
        var = adv(estimator="dr_grpo", whiten=True, whiten_eps=0.1, whiten_eps_mode="var")
        assert var[0] == pytest.approx(0.5 / math.sqrt(0.5 / 4 + 0.1))

    def test_whiten_token_weighted(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0], "length": [1, 3]})
        got = adv(
            log,
            estimator="dr_grpo",
            whiten=True,
            whiten_eps=0.0,
            length_col="length",
            token_weighted=True,
        )
        mean = (1 * 0.5 + 3 * -0.5) / 4
        var = (1 * (0.5 - mean) ** 2 + 3 * (-0.5 - mean) ** 2) / (4 - 1)
        assert got == pytest.approx([(0.5 - mean) / math.sqrt(var), (-0.5 - mean) / math.sqrt(var)])

    def test_a_flat_batch_whitens_to_zero(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", "a", "b"], "reward": [1.0, 1.0, 3.0]})
        assert adv(log, whiten=True, singleton="raw") == [0.0, 0.0, 3.0]

    def test_gdpo_with_the_selected_estimator_and_whiten_parameters(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 2, "r1": [1.0, 0.0], "r2": [0.0, 2.0]})
        common = {"reward_cols": ("r1", "r2"), "aggregation": "normalize_then_sum"}
        # rloo per reward: r1 +-1, r2 -+2; s = 1 - 2 = -1 and 1; batch std ddof 0 = 1
        got = adv(log, estimator="rloo", whiten=True, whiten_ddof=0, whiten_eps=0.0, **common)
        assert got == pytest.approx([-1.0, 1.0])
        # without whiten the main ddof 1 and eps: std sqrt(2)
        plain = adv(log, estimator="rloo", eps=0.0, **common)
        assert plain == pytest.approx([-1 / math.sqrt(2.0), 1 / math.sqrt(2.0)])

    def test_clip_stage_shaped_clips_before_the_whiten(self) -> None:
        got = adv(
            estimator="dr_grpo",
            whiten=True,
            whiten_eps=0.0,
            clip=(-0.25, 0.25),
            clip_stage="shaped",
        )
        std = math.sqrt(0.125 / 4)
        assert got == pytest.approx([0.25 / std, -0.25 / std, 0.0, 0.0, 0.0])


class TestRewardClip:
    def test_before_any_statistic(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 3, "reward": [25.0, -30.0, 0.0]})
        got = adv(log, estimator="dr_grpo", reward_clip=(-20.0, 20.0))
        assert got == pytest.approx([20.0, -20.0, 0.0])
        assert adv(log, estimator="dr_grpo", reward_clip=(-20.0, 20.0), singleton="raw") == got

    def test_the_combined_reward_or_each_gdpo_column(self) -> None:
        log = pl.DataFrame({"prompt_id": ["g"] * 2, "r1": [3.0, 0.0], "r2": [0.0, 0.5]})
        summed = adv(log, estimator="dr_grpo", reward_cols=("r1", "r2"), reward_clip=(0.0, 1.0))
        assert summed == pytest.approx([0.25, -0.25])  # 3 -> 1 and 0.5: r - mean
        gdpo = adv(
            log,
            estimator="dr_grpo",
            reward_cols=("r1", "r2"),
            aggregation="normalize_then_sum",
            reward_clip=(0.0, 1.0),
            eps=0.0,
        )
        # per column: r1 1, 0 -> +-0.5; r2 -+0.25; s = +-0.25: batch z-score +-1/sqrt(2)
        assert gdpo == pytest.approx([1 / math.sqrt(2.0), -1 / math.sqrt(2.0)])


class TestPositionalGroups:
    def test_runs_of_g_rows(self) -> None:
        log = pl.DataFrame({"reward": [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]})
        got = adv(log, group_size=4, group_cols=())
        assert got == pytest.approx(
            [0.8660254] + [-0.8660254] * 2 + [0.8660254] + [-0.8660254] * 2 + [0.8660254] * 2,
            abs=1e-7,
        )

    def test_runs_restart_in_each_batch(self) -> None:
        log = pl.DataFrame({"step": [1, 1, 1, 2, 2, 2], "reward": [0.0, 1.0, 5.0, 5.0, 2.0, 4.0]})
        got = adv(log, group_size=3, batch_col="step", estimator="dr_grpo")
        assert got == pytest.approx([-2.0, -1.0, 3.0, 4 / 3, -5 / 3, 1 / 3])

    def test_a_batch_that_is_not_a_whole_number_of_groups(self) -> None:
        log = pl.DataFrame({"step": [1, 1, 1, 2, 2], "reward": [0.0, 1.0, 5.0, 5.0, 2.0]})
        with pytest.raises(InputError) as info:
            compute_advantages(log, group_size=3, batch_col="step")
        assert info.value.message == "step=2 has 2 rows, not a multiple of group_size=3"


class TestNeeds:
    @pytest.mark.parametrize(
        ("estimator", "flag"),
        [("opo", "length_col"), ("remax", "baseline_col"), ("process", "step_rewards_col")],
    )
    def test_estimator_needs_its_column(self, estimator: str, flag: str) -> None:
        with pytest.raises(OptionsError) as info:
            compute_advantages(LOG, estimator=estimator)
        assert info.value.message == f"estimator {estimator} needs {flag}"

    def test_token_weighted_needs_lengths(self) -> None:
        with pytest.raises(OptionsError, match=r"^token_weighted needs length_col$"):
            compute_advantages(LOG, token_weighted=True)


# ------------------------------------------------------------------ properties per estimator


@st.composite
def logs(draw: st.DrawFn) -> pl.DataFrame:
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=8))
    keys = [f"g{i}" for i, size in enumerate(sizes) for _ in range(size)]
    rewards = draw(
        st.lists(st.integers(0, 8).map(lambda v: v / 4), min_size=len(keys), max_size=len(keys))
    )
    lengths = draw(st.lists(st.integers(1, 50), min_size=len(keys), max_size=len(keys)))
    order = draw(st.permutations(range(len(keys))))
    return pl.DataFrame(
        {
            "prompt_id": [keys[i] for i in order],
            "reward": [rewards[i] for i in order],
            "length": [lengths[i] for i in order],
            "greedy": [0.5] * len(keys),
        }
    )


PROPS = settings(max_examples=40, deadline=None)
OUTCOME = sorted(set(ESTIMATORS) - {"process"})


@pytest.mark.slow
@PROPS
@given(log=logs(), seed=st.integers(0, 1000))
def test_every_estimator_is_invariant_under_row_shuffling(log: pl.DataFrame, seed: int) -> None:
    order = np.random.default_rng(seed).permutation(log.height)
    for name in OUTCOME:
        opts = {"estimator": name, "length_col": "length", "baseline_col": "greedy"}
        direct = np.array(adv(log, **opts), dtype=np.float64)[order]
        shuffled = np.array(adv(log[order], **opts), dtype=np.float64)
        np.testing.assert_allclose(shuffled, direct, rtol=1e-12, atol=1e-12, err_msg=name)


@PROPS
@given(log=logs(), shift=st.integers(-20, 20))
def test_dr_grpo_is_shift_invariant(log: pl.DataFrame, shift: int) -> None:
    moved = log.with_columns(pl.col("reward") + shift)
    moved_adv = np.array(adv(moved, estimator="dr_grpo"), dtype=np.float64)
    base_adv = np.array(adv(log, estimator="dr_grpo"), dtype=np.float64)
    np.testing.assert_allclose(moved_adv, base_adv, atol=1e-12)


@PROPS
@given(log=logs())
def test_rloo_sums_to_zero_per_group(log: pl.DataFrame) -> None:
    got = compute_advantages(log, estimator="rloo")
    sums = got.group_by("prompt_id").agg(pl.col("advantage").sum(), n=pl.len())
    for total, n in sums.select("advantage", "n").iter_rows():
        if n >= 2:
            assert abs(total) < 1e-9


@PROPS
@given(log=logs())
def test_grpo_passk_is_nonzero_at_most_once_per_group(log: pl.DataFrame) -> None:
    got = compute_advantages(log, estimator="grpo_passk")
    nonzero = got.group_by("prompt_id").agg((pl.col("advantage") != 0).sum().alias("k"))
    assert nonzero["k"].max() <= 1  # type: ignore[operator]


@PROPS
@given(log=logs())
def test_batch_whitening_has_mean_zero(log: pl.DataFrame) -> None:
    for name in ("reinforce_pp", "reinforce_pp_baseline"):
        values = [v for v in adv(log, estimator=name) if v is not None]
        assert abs(sum(values) / len(values)) < 1e-9


@pytest.mark.slow
@PROPS
@given(log=logs(), scale=st.sampled_from([0.5, 2.0, 8.0]), shift=st.integers(-5, 5))
def test_zscore_estimators_are_affine_invariant_without_eps(
    log: pl.DataFrame, scale: float, shift: int
) -> None:
    moved = log.with_columns(pl.col("reward") * scale + shift)
    for name in ("grpo", "batch_std", "reinforce_pp", "reinforce_pp_baseline"):
        base = np.array(adv(log, estimator=name, eps=0.0), dtype=np.float64)
        new = np.array(adv(moved, estimator=name, eps=0.0), dtype=np.float64)
        np.testing.assert_allclose(new, base, atol=1e-9, equal_nan=True, err_msg=name)


@PROPS
@given(log=logs())
def test_loo_grpo_std_is_the_brute_force_leave_one_out_std(log: pl.DataFrame) -> None:
    """loo_grpo with eps 0 and positive_std is (r - b) / s, b and s the mean and std
    (ddof 1) of the others computed directly (r - b where s is 0)."""
    got = compute_advantages(log, estimator="loo_grpo", eps=0.0, eps_mode="positive_std")
    for rows in got.partition_by("prompt_id"):
        rewards = rows["reward"].to_list()
        if len(set(rewards)) < 2 or len(rewards) < 3:
            continue
        for i, (r, a) in enumerate(zip(rewards, rows["advantage"], strict=True)):
            others = rewards[:i] + rewards[i + 1 :]
            b = sum(others) / len(others)
            std = math.sqrt(sum((o - b) ** 2 for o in others) / (len(others) - 1))
            expected = (r - b) if std == 0 else (r - b) / std
            assert a == pytest.approx(expected, rel=1e-9, abs=1e-9)


@PROPS
@given(log=logs(), estimator=st.sampled_from(["grpo", "dr_grpo", "rloo", "loo_grpo", "maxrl"]))
def test_whiten_gives_batch_mean_zero_and_std_one(log: pl.DataFrame, estimator: str) -> None:
    got = adv(log, estimator=estimator, whiten=True, whiten_eps=0.0, singleton="formula")
    values = np.array([v for v in got if v is not None], dtype=np.float64)
    if values.size == 0 or np.all(values == 0):
        return  # a flat batch: exactly 0
    assert abs(values.mean()) < 1e-9
    assert values.std(ddof=1) == pytest.approx(1.0, rel=1e-9)


@PROPS
@given(log=logs())
def test_positive_std_leaves_x_where_the_variance_is_zero(log: pl.DataFrame) -> None:
    """loo_grpo: a response whose others are all equal gets r - b undivided (under
    positive_std), whatever eps."""
    got = compute_advantages(log, estimator="loo_grpo", eps=0.3, eps_mode="positive_std")
    for rows in got.partition_by("prompt_id"):
        rewards = rows["reward"].to_list()
        for i, (r, a) in enumerate(zip(rewards, rows["advantage"], strict=True)):
            others = rewards[:i] + rewards[i + 1 :]
            if len(others) >= 2 and len(set(others)) == 1:
                assert a == (0.0 if r == others[0] else r - others[0])

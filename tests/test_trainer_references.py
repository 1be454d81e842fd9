"""The issue-30 trainer references (tests/trainer_reference.py) checked by hand, so that the
presets tested against them are tested against something right. Only the references run
here: no grpo_cli."""

from __future__ import annotations

import math

import pytest

from tests import trainer_reference as ref

# Issue 30's case: groups [1,0,0,1] and [0,0,1,1], one token each.
REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
KEYS = [0, 0, 0, 0, 1, 1, 1, 1]
ONES = [1] * 8
SIGNS = [1, -1, -1, 1, -1, -1, 1, 1]


def assert_values(got: list[float], expected: list[float], tol: float = 1e-6) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if math.isnan(e):
            assert math.isnan(g)
        else:
            assert g == pytest.approx(e, abs=tol), (got, expected)


def signed(value: float) -> list[float]:
    return [s * value for s in SIGNS]


def test_issue_hand_values() -> None:
    # nemo-rl: a 1 sees others [0,0,1]: b = 1/3, E[x^2] = 1/3, var = (1/3 - 1/9) * 3/2 = 1/3,
    # (2/3) / (sqrt(1/3) + 1e-6) = 1.154699; a 0 the mirror image.
    assert_values(ref.nemo_rl_grpo(REWARDS, KEYS), signed(1.154699))
    # skyrl-maxrl: (1 - 0.5) / (0.5 + 1e-6) = 0.999998.
    assert_values(ref.skyrl_maxrl(REWARDS, KEYS), signed(0.999998))
    # areal: group z-score 0.5 / (sqrt(1/3) + 1e-5) = 0.866010; then over the 8 tokens mean 0,
    # std (ddof 1) 0.866010 * sqrt(8/7) = 0.925820: 0.866010 / (0.925820 + 1e-5) = 0.935404.
    assert_values(ref.areal(REWARDS, 4, ONES), signed(0.935404))
    # open-instruct-standard: np.std (ddof 0) is 0.5: 0.5 / (0.5 + 1e-8) = 1.0.
    assert_values(ref.open_instruct(REWARDS, 4, "standard"), signed(1.0))


def test_nemo_rl_divides_only_where_the_leave_one_out_std_is_positive() -> None:
    # [1,0,0,0]: the 1 sees [0,0,0] (b 0, std 0): 1 - 0 = 1, not divided. A 0 sees [1,0,0]:
    # b = 1/3, var = (1/3 - 1/9) * 3/2 = 1/3: (-1/3) / (0.577350 + 1e-6) = -0.577349.
    assert_values(ref.nemo_rl_grpo([1, 0, 0, 0], [0] * 4), [1.0] + [-0.577349] * 3)
    # A pair: k = 1, (0) * (1/0) = nan -> std 0, never divided: +-1. A singleton: baseline r.
    assert_values(ref.nemo_rl_grpo([1, 0, 7], [0, 0, 1]), [1.0, -1.0, 0.0])
    # no-std (and its singleton 0): r - mean of the others = +-2/3.
    assert_values(ref.nemo_rl_grpo(REWARDS, KEYS, normalize_rewards=False), signed(2 / 3))
    assert_values(ref.nemo_rl_grpo([7], [0], normalize_rewards=False), [0.0])
    # no-loo: group std sqrt(1/3): 0.5 / (0.577350 + 1e-6) = 0.866024.
    assert_values(ref.nemo_rl_grpo(REWARDS, KEYS, leave_one_out=False), signed(0.866024))


def test_gdpo_weight_orders() -> None:
    # One group of 4, c = 1.154699 (as above): A_a = [c,c,-c,-c], A_b = [c,-c,c,-c].
    # NeMo-RL sorts the names, so weights [2, 1] go to a, b: 2A_a + A_b = [3c,c,-c,-3c];
    # the batch z-score (ddof 1, no eps) gives [3,1,-1,-3] / sqrt(20/3) = +-1.161895, +-0.387298.
    components = {"b": [1.0, 0.0, 1.0, 0.0], "a": [1.0, 1.0, 0.0, 0.0]}
    z = [1.161895, 0.387298, -0.387298, -1.161895]
    assert_values(ref.nemo_rl_gdpo(components, [0] * 4, [2, 1]), z)
    # verl keeps gdpo_reward_keys' order (b, a): 2A_b + A_a = [3c,-c,c,-3c] (grpo's c is
    # 0.866024 there; token whitening with ddof 1 and var + 1e-8 gives the same z).
    assert_values(ref.verl_gdpo(components, [0] * 4, [1] * 4, [2, 1]), [z[0], z[2], z[1], z[3]])
    # A batch of one response: std nan, only centred: 0.
    assert_values(ref.nemo_rl_gdpo({"a": [1.0], "b": [2.0]}, [0]), [0.0])


def test_singletons() -> None:
    assert_values(ref.skyrl_grpo([2.0], [0]), [2 / (1 + 1e-6)])  # mean 0, std 1
    assert_values(ref.skyrl_grpo([2.0], [0], norm_by_std=False), [2.0])
    assert_values(ref.skyrl_rloo([2.0], [0]), [0.0])
    assert_values(ref.skyrl_maxrl([2.0], [0]), [2.0])
    assert_values(ref.verl_grpo_vectorized([2.0], [0]), [2 / (1 + 1e-6)])
    assert_values(
        ref.verl_rloo_vectorized([2.0, 1, 0, 0, 1], [9, 0, 0, 0, 0]),
        [0.0, 2 / 3, -2 / 3, -2 / 3, 2 / 3],
    )
    assert_values(ref.slime_grpo([2.0, 5.0], 1), [0.0, 0.0])  # n = 1 turns std off
    assert_values(ref.roll_grpo([2.0], 1), [math.nan])  # torch.std of one value
    assert_values(ref.prime_rl_grpo([2.0], [0]) + ref.prime_rl_max_rl([2.0], [0]), [0.0, 0.0])
    assert_values(ref.open_instruct([2.0], 1, "standard"), [0.0])
    # AReaL group_size 1: the mean is the row itself (0 only with leave-one-out), std 1:
    # grpo gives 0, rloo keeps r. Rows after the last full slice: mean 0, std 0 -> x / 1e-5.
    assert_values(ref.areal([1.0, 0.0, 3.0], 1, [1] * 3, adv_norm=False), [0.0] * 3)
    rloo = ref.areal([1.0, 0.0, 3.0], 1, [1] * 3, variant="rloo", adv_norm=False)
    assert_values(rloo, [1.0, 0.0, 3.0])
    tail = ref.areal([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], 4, [1] * 6, adv_norm=False)
    assert_values(tail, [0.866010, -0.866010, -0.866010, 0.866010, 100000.0, 0.0], tol=1e-2)


def test_token_whitening_variants() -> None:
    # ROLL whiten, lengths [1,3,1,3] per group: +-0.866024 on 8 tokens each, mean 0,
    # var (ddof 1) = a^2 * 16/15: +-sqrt(15/16) = +-0.968246.
    lengths = [1, 3, 1, 3] * 2
    assert_values(ref.roll_grpo(REWARDS, 4, lengths, whiten_advantages=True), signed(0.968246))
    # SkyRL reinforce++: r itself, 8 tokens of 0/1: mean 0.5, var 0.25 * 8/7: +-sqrt(7/8).
    assert_values(ref.skyrl_reinforce_pp(REWARDS, ONES), signed(math.sqrt(7 / 8)))
    # NeMo-RL reinforce++: +-0.5 after the group mean, population var 0.25: +-1.
    assert_values(ref.nemo_rl_reinforce_pp(REWARDS, KEYS, ONES), signed(1.0))


def test_openrlhf_clips_before_whitening() -> None:
    # reinforce, n = 1: [30,0,0,5] clipped to [10,0,0,5]: mean 3.75, deviations
    # [6.25,-3.75,-3.75,1.25], population var 68.75/4 = 17.1875, std 4.145781:
    # [1.507557, -0.904534, -0.904534, 0.301511]. (Unclipped the mean would be 8.75.)
    got = ref.openrlhf_0_11_2([30, 0, 0, 5], 1, "reinforce", [1] * 4)
    assert_values(got, [1.507557, -0.904534, -0.904534, 0.301511])
    # --no_std_norm: the centring only.
    centred = ref.openrlhf_0_11_2([30, 0, 0, 5], 1, "reinforce", [1] * 4, no_std_norm=True)
    assert_values(centred, [6.25, -3.75, -3.75, 1.25])
    # flash_reinforce: batch mean 9: [21,-9,-9,-3], clipped to [10,-9,-9,-3], no whitening.
    assert_values(ref.openrlhf_0_11_2([30, 0, 0, 6], 1, "flash_reinforce"), [10, -9, -9, -3])


def test_mean_scaled_and_centred() -> None:
    # prime-rl max_rl: mean 1 -> [1,-1]; mean 0 -> 0; [-1,1,3] mean 1 -> [-2,0,2].
    got = ref.prime_rl_max_rl([2, 0, 0, 0, -1, 1, 3], [0, 0, 1, 1, 2, 2, 2])
    assert_values(got, [1, -1, 0, 0, -2, 0, 2])
    assert_values(ref.prime_rl_grpo(REWARDS, KEYS), signed(0.5))
    assert_values(ref.open_instruct(REWARDS, 4), signed(0.5))
    assert_values(ref.slime_grpo(REWARDS, 4, std_normalization=False), signed(0.5))
    # slime: 8 samples where n * rollout_batch_size = 12: one group of 8, mean 0.5,
    # std (ddof 1) sqrt(2/7) = 0.534522: 0.5 / (0.534522 + 1e-6) = 0.935413.
    assert_values(ref.slime_grpo(REWARDS, 4, rollout_batch_size=3), signed(0.935413))

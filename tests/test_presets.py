"""Every preset against an independent re-implementation of its trainer's published code,
on a log with variable group sizes, singletons, ties, zero-variance groups and nulls."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest

from grpo_cli.core.errors import OptionsError
from grpo_cli.core.presets import PRESETS, get_preset, merge_options, presets_frame
from grpo_cli.jobs.pipeline import annotate
from tests import trainer_reference as ref

# Group sizes 1 (singleton), 2, 3, 5, 8 and 16; rewards are multiples of 1/64 so that group
# means of equal values are exact in float64 for every implementation.
SIZES = {"a": 1, "b": 2, "c": 3, "d": 5, "e": 8, "f": 16, "g": 4, "h": 6}


def hostile_log(seed: int = 7, with_nulls: bool = False) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for key, size in SIZES.items():
        for i in range(size):
            if key == "g":
                reward = 0.75  # zero-variance group
            elif key == "h":
                reward = [1.0, 1.0, 0.0, 0.5, 1.0, 0.25][i]  # a tie for the maximum
            else:
                reward = float(rng.integers(0, 129)) / 64
            rows.append(
                {
                    "step": 1 + (ord(key) % 2),
                    "prompt_id": key,
                    "reward": reward,
                    "format_reward": float(rng.integers(0, 2)),
                    "length": int(rng.integers(1, 40)),
                }
            )
    frame = pl.DataFrame(rows)
    order = np.random.default_rng(seed + 1).permutation(frame.height)
    frame = frame[order]
    if with_nulls:
        frame = frame.with_columns(
            pl.when(pl.int_range(pl.len()).is_in([3, 17]))
            .then(None)
            .otherwise(pl.col("reward"))
            .alias("reward")
        )
    return frame


def adv(frame: pl.DataFrame, preset: str, **explicit: Any) -> list[float | None]:
    return annotate(frame, preset, **explicit).frame["advantage"].to_list()


def close(got: list[float | None], expected: list[float], tol: float = 1e-12) -> None:
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g is not None, i
        assert math.isclose(g, e, rel_tol=tol, abs_tol=tol), (i, g, e)


LOG = hostile_log()
KEYS = LOG["prompt_id"].to_list()
REWARDS = LOG["reward"].to_list()
LENGTHS = LOG["length"].to_list()


class TestTrl:
    @pytest.mark.parametrize(
        ("preset", "scale"), [("trl", "group"), ("trl-batch", "batch"), ("trl-none", "none")]
    )
    def test_single_reward_with_nulls(self, preset: str, scale: str) -> None:
        log = hostile_log(with_nulls=True)
        rewards = np.array([[np.nan if r is None else r] for r in log["reward"].to_list()])
        expected = ref.trl_grpo(rewards, log["prompt_id"].to_list(), scale_rewards=scale)
        close(adv(log, preset), expected)

    def test_weighted_sum_of_two_rewards_with_a_partial_none(self) -> None:
        log = hostile_log(with_nulls=True)
        matrix = np.array(
            [
                [np.nan if r is None else r, f]
                for r, f in zip(log["reward"].to_list(), log["format_reward"], strict=True)
            ]
        )
        expected = ref.trl_grpo(matrix, log["prompt_id"].to_list(), weights=[1.0, 0.5])
        got = adv(log, "trl", reward_cols=("reward", "format_reward"), reward_weights=(1, 0.5))
        close(got, expected)

    def test_gdpo(self) -> None:
        log = hostile_log(with_nulls=True)
        matrix = np.array(
            [
                [np.nan if r is None else r, f]
                for r, f in zip(log["reward"].to_list(), log["format_reward"], strict=True)
            ]
        )
        expected = ref.trl_grpo(
            matrix, log["prompt_id"].to_list(), weights=[1.0, 0.5], aggregation="normalize_then_sum"
        )
        got = adv(log, "trl-gdpo", reward_cols=("reward", "format_reward"), reward_weights=(1, 0.5))
        close(got, expected)

    def test_all_none_row_is_excluded_and_gets_zero(self) -> None:
        log = pl.DataFrame(
            {"prompt_id": ["p"] * 4, "r1": [1.0, None, 0.0, None], "r2": [None, None, 1.0, 1.0]}
        )
        got = adv(log, "trl", reward_cols=("r1", "r2"))
        # Rewards 1, (unscorable), 1, 1: the scorable three are equal, so 0 everywhere.
        assert got == [0.0, 0.0, 0.0, 0.0]


class TestVerl:
    def test_grpo(self) -> None:
        close(adv(LOG, "verl"), ref.verl_grpo(REWARDS, KEYS))

    def test_singleton_gets_reward_over_one_plus_eps(self) -> None:
        got = annotate(LOG, "verl").frame.filter(pl.col("prompt_id") == "a")
        reward = got["reward"][0]
        assert got["advantage"][0] == pytest.approx(reward / (1 + 1e-6), rel=1e-15)

    def test_dr_grpo(self) -> None:
        close(adv(LOG, "verl-dr-grpo"), ref.verl_grpo(REWARDS, KEYS, norm_by_std=False))

    def test_rloo(self) -> None:
        close(adv(LOG, "verl-rloo"), ref.verl_rloo(REWARDS, KEYS))

    def test_reinforce_pp_baseline_token_weighted(self) -> None:
        expected = ref.verl_reinforce_pp_baseline(REWARDS, KEYS, LENGTHS)
        close(adv(LOG, "verl-reinforce-pp-baseline", length_col="length"), expected)

    def test_gpg(self) -> None:
        close(adv(LOG, "verl-gpg"), ref.verl_gpg(REWARDS, KEYS))

    def test_grpo_passk(self) -> None:
        without_singleton = LOG.filter(pl.col("prompt_id") != "a")
        expected = ref.verl_grpo_passk(
            without_singleton["reward"].to_list(), without_singleton["prompt_id"].to_list()
        )
        close(adv(without_singleton, "verl-grpo-passk"), expected)
        # verl raises on a one-response group; grpo-adv gives it null.
        assert annotate(LOG, "verl-grpo-passk").frame.filter(pl.col("prompt_id") == "a")[
            "advantage"
        ].to_list() == [None]

    def test_passk_tie_for_the_best_gives_zero(self) -> None:
        tied = annotate(LOG, "verl-grpo-passk").frame.filter(pl.col("prompt_id") == "h")
        assert tied["advantage"].to_list() == [0.0] * 6

    def test_an_output_named_like_a_default_role_the_dump_replaces(self) -> None:
        """A verl dump's rewards are ``score`` and its groups the uid's prompt: an advantage
        column named ``reward`` (the default reward column, which this log lacks) is no
        clash; the column checks run on the roles the log decides, not on the defaults."""
        dump = pl.DataFrame(
            {"uid": ["a_0", "a_1", "b_0", "b_1"], "score": [1.0, 0.0, 1.0, 1.0], "step": 1}
        )
        got = annotate(dump, "verl", advantage_col="reward").frame["reward"].to_list()
        half = 0.5 / (0.5**0.5 + 1e-6)  # (1 - mean) / (std + eps), std sqrt(0.5)
        close(got, [half, -half, 0.0, 0.0])


class TestOpenRlhf:
    @pytest.mark.parametrize(
        ("preset", "estimator"),
        [
            ("openrlhf-group-norm", "group_norm"),
            ("openrlhf-rloo", "rloo"),
            ("openrlhf-dr-grpo", "dr_grpo"),
        ],
    )
    def test_group_estimators(self, preset: str, estimator: str) -> None:
        fixed = LOG.filter(pl.col("prompt_id") != "a")  # OpenRLHF asserts n > 1
        expected = ref.openrlhf(fixed["reward"].to_list(), fixed["prompt_id"].to_list(), estimator)
        close(adv(fixed, preset), expected)

    def test_reinforce_baseline_clips_before_token_weighted_whitening(self) -> None:
        scaled = LOG.filter(pl.col("prompt_id") != "a").with_columns(pl.col("reward") * 40)
        shaped = ref.openrlhf(
            scaled["reward"].to_list(), scaled["prompt_id"].to_list(), "dr_grpo", clip=1e9
        )
        assert max(abs(s) for s in shaped) > 10  # the clamp bites
        expected = ref.openrlhf(
            scaled["reward"].to_list(),
            scaled["prompt_id"].to_list(),
            "reinforce_baseline",
            lengths=scaled["length"].to_list(),
        )
        close(adv(scaled, "openrlhf-reinforce-baseline", length_col="length"), expected)

    def test_group_norm_clips_large_groups(self) -> None:
        big = pl.DataFrame({"prompt_id": ["p"] * 200, "reward": [1.0] + [0.0] * 199})
        got = adv(big, "openrlhf-group-norm")
        assert got[0] == 10.0  # (G-1)/sqrt(G) = 14.1 before the clip
        assert got[1] == pytest.approx(-1 / math.sqrt(200), rel=1e-6)


def test_seed_preset_is_the_lessons_function() -> None:
    log = pl.DataFrame({"prompt_id": ["1"] * 4 + ["2"] * 4, "reward": [1.0, 0, 0, 1, 0, 0, 1, 1]})
    assert adv(log, "seed") == pytest.approx(
        [0.8660254] * 1 + [-0.8660254] * 2 + [0.8660254] + [-0.8660254] * 2 + [0.8660254] * 2,
        abs=1e-7,
    )


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_runs_on_the_hostile_log(name: str) -> None:
    log = hostile_log(with_nulls=True)
    result = annotate(log, name, length_col="length")
    values = result.frame["advantage"]
    assert values.len() == log.height
    assert values.is_nan().sum() == 0
    finite = values.drop_nulls()
    assert finite.len() >= log.height - 3
    assert finite.abs().max() < 100  # type: ignore[operator]
    assert result.run.singleton_groups == 1


def test_explicit_options_override_the_preset() -> None:
    fields = merge_options("verl", {"eps": 0.5})
    assert fields["eps"] == 0.5
    assert fields["singleton"] == "verl"
    loose = adv(LOG, "verl", eps=0.5)
    expected = ref.verl_grpo(REWARDS, KEYS, epsilon=0.5)
    close(loose, expected)


def test_unknown_preset_lists_the_valid_ones() -> None:
    with pytest.raises(OptionsError) as info:
        get_preset("ppo")
    assert info.value.message == "unknown preset 'ppo'"
    assert info.value.hint is not None and "trl, trl-batch" in info.value.hint


def test_every_preset_names_its_trainer_version_file_and_setting() -> None:
    table = presets_frame()
    assert table["preset"].to_list() == list(PRESETS)
    for row in table.iter_rows(named=True):
        assert row["trainer"] and row["version"] and row["file"] and row["setting"]
    files = dict(zip(table["preset"], table["file"], strict=True))
    assert "core_algos.py" in files["verl"]
    assert "grpo_trainer.py" in files["trl"]
    assert "experience_maker.py" in files["openrlhf-group-norm"]
    assert "advantage_estimator.py GDPOAdvantageEstimator" in files["nemo-rl-gdpo"]
    row = table.row(list(PRESETS).index("areal"), named=True)
    assert (row["trainer"], row["version"], row["clip"]) == (
        "AReaL",
        "v1.0.4 @4aef98d8",
        "[-20, 20] (reward)",
    )
    assert row["whiten"] == "ddof 1, 1e-05 (std)"
    # grouped by trainer: each trainer's presets are consecutive rows
    trainers = table["trainer"].to_list()
    runs = [t for i, t in enumerate(trainers) if i == 0 or trainers[i - 1] != t]
    assert len(runs) == len(set(trainers)) == 11


def test_nemo_rl_gdpo_weights_follow_the_sorted_reward_names() -> None:
    """NeMo-RL sorts its reward/<name> keys and applies reward_weights in that order: the
    columns given as (reward, format_reward) weigh format_reward 2 and reward 1."""
    log = hostile_log()
    given = annotate(
        log, "nemo-rl-gdpo", reward_cols=("reward", "format_reward"), reward_weights=(2, 1)
    )
    assert given.options.reward_cols == ("format_reward", "reward")
    keys = log["prompt_id"].to_list()
    components = {c: log[c].to_list() for c in ("reward", "format_reward")}
    expected = ref.nemo_rl_gdpo(components, keys, weights=[2.0, 1.0])
    got = given.frame["advantage"].to_list()
    assert max(abs(g - e) / max(1, abs(e)) for g, e in zip(got, expected, strict=True)) < 2e-6
    # without the preset the weights follow the columns as given
    unsorted = annotate(log, "trl-gdpo", reward_cols=("reward", "format_reward"))
    assert unsorted.options.reward_cols == ("reward", "format_reward")

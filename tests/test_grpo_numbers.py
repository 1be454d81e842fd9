"""The GRPO numbers: the lessons' worked examples, every policy, hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest

from grpo_cli import ESTIMATORS, compute_advantages
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.estimators import get_estimator
from tests.conftest import make_log


def advantages(frame: pl.DataFrame, **options: object) -> list[float | None]:
    return compute_advantages(frame, **options)["advantage"].to_list()  # type: ignore[arg-type]


def lesson_torch_formula(
    rewards: npt.NDArray[np.float64], group_size: int, eps: float = 1e-8
) -> npt.NDArray[np.float64]:
    """The reference lesson's PyTorch function, written with numpy: view(B, G), mean and
    std(dim=1) (torch's default correction=1), (r - mean) / (std + eps), flatten."""
    grouped = rewards.reshape(-1, group_size)
    mean = grouped.mean(axis=1, keepdims=True)
    std = grouped.std(axis=1, ddof=1, keepdims=True)
    result: npt.NDArray[np.float64] = ((grouped - mean) / (std + eps)).reshape(-1)
    return result


class TestLessonExamples:
    def test_illustrated_grpo_two_prompts_ddof1(self) -> None:
        log = make_log({"p1": [1, 0, 0, 1], "p2": [0, 0, 1, 1]})
        got = advantages(log)
        expected = [0.8660, -0.8660, -0.8660, 0.8660, -0.8660, -0.8660, 0.8660, 0.8660]
        assert got == pytest.approx(expected, abs=5e-5)
        exact = 0.5 / (math.sqrt(1 / 3) + 1e-8)
        assert got[0] == pytest.approx(exact, rel=1e-15)

    def test_matches_the_lessons_torch_function(self) -> None:
        rewards = np.array([1, 0, 0, 1, 0, 0, 1, 1], dtype=np.float64)
        log = make_log({"p1": list(rewards[:4]), "p2": list(rewards[4:])})
        got = np.array(advantages(log), dtype=np.float64)
        np.testing.assert_allclose(got, lesson_torch_formula(rewards, 4), rtol=1e-15)

    def test_hugging_face_eight_responses_ddof0(self) -> None:
        log = make_log({"q": [1, 0, 1, 0, 1, 0, 1, 0]})
        got = advantages(log, ddof=0)
        assert got == pytest.approx([1.0, -1.0] * 4, abs=1e-7)
        assert got[0] == 0.5 / (0.5 + 1e-8)

    def test_self_check_one_correct_of_four_ddof0(self) -> None:
        log = make_log({"q": [0, 1, 0, 0]})
        got = advantages(log, ddof=0)
        assert got[1] == pytest.approx(1.7321, abs=5e-5)
        assert got[0] == pytest.approx(-0.5774, abs=5e-5)
        assert got[1] == pytest.approx(0.75 / (math.sqrt(0.1875) + 1e-8), rel=1e-15)


class TestHandComputed:
    def test_ddof_changes_the_std(self) -> None:
        log = make_log({"g": [1, 2, 3, 4]})
        sample = advantages(log, eps=0.0)
        population = advantages(log, ddof=0, eps=0.0)
        assert sample == pytest.approx(
            [
                -1.5 / math.sqrt(5 / 3),
                -0.5 / math.sqrt(5 / 3),
                0.5 / math.sqrt(5 / 3),
                1.5 / math.sqrt(5 / 3),
            ]
        )
        assert population == pytest.approx(
            [
                -1.5 / math.sqrt(1.25),
                -0.5 / math.sqrt(1.25),
                0.5 / math.sqrt(1.25),
                1.5 / math.sqrt(1.25),
            ]
        )

    def test_eps_is_added_to_the_std(self) -> None:
        log = make_log({"g": [0, 1]})
        got = advantages(log, eps=0.5)
        std = math.sqrt(0.5)
        assert got == pytest.approx([-0.5 / (std + 0.5), 0.5 / (std + 0.5)], rel=1e-15)

    def test_variable_group_sizes(self) -> None:
        log = make_log({"a": [0, 1], "b": [0, 0, 0, 1], "c": [2, 4, 6]})
        got = advantages(log, eps=0.0)
        b_std = math.sqrt((3 * 0.25**2 + 0.75**2) / 3)  # = 0.5
        expected = [
            -0.5 / math.sqrt(0.5),
            0.5 / math.sqrt(0.5),
            -0.25 / b_std,
            -0.25 / b_std,
            -0.25 / b_std,
            0.75 / b_std,
            -1.0,
            0.0,
            1.0,
        ]
        assert got == pytest.approx(expected, rel=1e-14)

    def test_rows_of_a_group_need_not_be_contiguous(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", "b", "a", "b"], "reward": [1.0, 5.0, 0.0, 5.0]})
        got = advantages(log, eps=0.0)
        assert got == pytest.approx([1 / math.sqrt(2), 0.0, -1 / math.sqrt(2), 0.0])

    def test_composite_group_key(self) -> None:
        log = pl.DataFrame(
            {
                "step": [1, 1, 2, 2],
                "prompt_id": ["p", "p", "p", "p"],
                "reward": [0.0, 1.0, 3.0, 3.0],
            }
        )
        by_both = advantages(log, group_cols=("step", "prompt_id"), eps=0.0)
        assert by_both == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0])
        assert advantages(log, eps=0.0) == by_both  # the default groups within steps
        by_prompt = advantages(log, group_cols=("prompt_id",), eps=0.0)  # pooled, as asked
        assert by_prompt[0] == pytest.approx((0 - 1.75) / np.std([0, 1, 3, 3], ddof=1))

    @pytest.mark.parametrize("value", [0.1, 0.3, 0.7, 1 / 3, 1e12 + 0.1, -2.5])
    @pytest.mark.parametrize("size", [2, 7, 8, 16, 64])
    def test_zero_variance_group_is_exactly_zero(self, value: float, size: int) -> None:
        log = make_log({"flat": [value] * size})
        assert advantages(log) == [0.0] * size
        assert advantages(log, ddof=0, eps=0.0) == [0.0] * size

    def test_integer_and_boolean_rewards(self) -> None:
        ints = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [0, 1]})
        bools = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [False, True]})
        assert advantages(ints) == advantages(bools) == advantages(make_log({"a": [0.0, 1.0]}))


class TestSingletonPolicy:
    def test_zero_is_the_default(self) -> None:
        assert advantages(make_log({"s": [0.7], "g": [0.0, 1.0]}))[0] == 0.0

    def test_raw_gives_the_reward(self) -> None:
        assert advantages(make_log({"s": [0.7]}), singleton="raw") == [0.7]

    def test_null_gives_null(self) -> None:
        assert advantages(make_log({"s": [0.7]}), singleton="null") == [None]

    def test_applies_with_ddof0_too(self) -> None:
        assert advantages(make_log({"s": [0.7]}), ddof=0, singleton="raw") == [0.7]

    def test_a_group_with_one_valid_reward_is_a_singleton(self) -> None:
        log = make_log({"s": [None, 0.25, float("nan")]})
        assert advantages(log, singleton="raw") == [None, 0.25, None]


class TestNullRewards:
    def test_null_is_left_out_of_the_statistics(self, tiny_log: pl.DataFrame) -> None:
        got = compute_advantages(tiny_log, with_stats=True, eps=0.0)
        rows = got.filter(pl.col("prompt_id") == "with_null")
        assert rows["advantage"].to_list() == pytest.approx([1.0, None, -1.0, 0.0], nan_ok=False)
        assert rows["group_mean"].to_list() == [0.5] * 4
        assert rows["group_std"].to_list() == pytest.approx([0.5] * 4)
        assert rows["group_size"].to_list() == [4] * 4

    def test_nan_counts_as_null(self) -> None:
        with_nan = make_log({"g": [1.0, float("nan"), 0.0]})
        with_null = make_log({"g": [1.0, None, 0.0]})
        assert advantages(with_nan) == advantages(with_null)
        assert advantages(with_nan)[1] is None

    def test_all_null_group_gives_nulls(self) -> None:
        assert advantages(make_log({"g": [None, None]})) == [None, None]


class TestApi:
    def test_lazyframe_in_lazyframe_out(self, tiny_log: pl.DataFrame) -> None:
        lazy = compute_advantages(tiny_log.lazy())
        assert isinstance(lazy, pl.LazyFrame)
        assert lazy.collect().equals(compute_advantages(tiny_log))

    def test_with_stats_columns(self, tiny_log: pl.DataFrame) -> None:
        got = compute_advantages(tiny_log, with_stats=True)
        assert got.columns == [
            "prompt_id",
            "reward",
            "advantage",
            "group_size",
            "group_mean",
            "group_std",
        ]
        assert got.schema["advantage"] == pl.Float64
        assert got.schema["group_size"] == pl.Int64
        flat = got.filter(pl.col("prompt_id") == "flat")
        assert flat["group_std"].to_list() == [0.0] * 3

    def test_registry_lists_grpo(self) -> None:
        assert "grpo" in ESTIMATORS
        assert "(r - mean_g) / (std_g + eps)" in ESTIMATORS["grpo"].summary

    def test_unknown_estimator_lists_the_valid_ones(self) -> None:
        with pytest.raises(OptionsError) as info:
            get_estimator("ppo")
        assert info.value.message == "unknown estimator 'ppo'"
        assert info.value.hint == f"did you mean opo? (choose one of: {', '.join(ESTIMATORS)})"
        with pytest.raises(OptionsError) as far:
            get_estimator("xyzzy")
        assert far.value.hint == f"choose one of: {', '.join(ESTIMATORS)}"

    @pytest.mark.parametrize("typed", ["RLOO", "Rloo", "dr-grpo", "DR_GRPO", "grpo-passk"])
    def test_names_ignore_case_and_separators(self, typed: str) -> None:
        assert get_estimator(typed).name == typed.lower().replace("-", "_")

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            ({"ddof": 2}, "ddof must be 0 or 1, got 2"),
            ({"eps": -1.0}, "eps must be a finite number >= 0, got -1.0"),
            ({"eps": math.inf}, "eps must be a finite number >= 0, got inf"),
            ({"singleton": "bogus"}, "unknown singleton value 'bogus'"),
            ({"group_cols": ()}, "no group column given"),
            ({"reward_col": "prompt_id"}, "'prompt_id' is both a reward and a group column"),
            ({"typo": 1}, "unknown option(s): typo"),
        ],
    )
    def test_bad_options(
        self, tiny_log: pl.DataFrame, overrides: dict[str, object], message: str
    ) -> None:
        with pytest.raises(OptionsError) as info:
            compute_advantages(tiny_log, **overrides)  # type: ignore[arg-type]
        assert info.value.message == message
        assert info.value.exit_code == 2

    def test_missing_column_names_the_columns(self, tiny_log: pl.DataFrame) -> None:
        with pytest.raises(InputError) as info:
            compute_advantages(tiny_log, reward_col="score")
        assert info.value.message == (
            "reward column 'score' not found; the input has columns: prompt_id, reward"
        )
        assert (
            info.value.hint
            == 'choose the reward column with reward_cols, e.g. reward_cols=("reward",)'
        )

    def test_text_rewards_are_refused_with_an_example(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", "a"], "reward": ["1.0", "abc"]})
        with pytest.raises(InputError) as info:
            compute_advantages(log)
        assert info.value.message == (
            "reward column 'reward' holds String values, not numbers (row 1: 'abc')"
        )
        assert info.value.exit_code == 3

    def test_existing_advantage_column_is_not_overwritten(self, tiny_log: pl.DataFrame) -> None:
        with pytest.raises(InputError, match="already has a column named 'advantage'"):
            compute_advantages(tiny_log.with_columns(advantage=pl.lit(1.0)))
        renamed = compute_advantages(
            tiny_log.with_columns(advantage=pl.lit(1.0)), advantage_col="adv2"
        )
        assert renamed["advantage"].to_list() == [1.0] * tiny_log.height

    def test_null_group_key_is_refused(self) -> None:
        log = pl.DataFrame({"prompt_id": ["a", None, "a"], "reward": [1.0, 0.0, 0.0]})
        with pytest.raises(InputError) as info:
            compute_advantages(log)
        assert info.value.message == "1 row(s) have a null group or batch key (prompt_id)"


def test_results_are_bit_for_bit_repeatable() -> None:
    from tests.conftest import SAMPLE_FILES

    log = pl.read_parquet(SAMPLE_FILES["parquet"])
    first = compute_advantages(log, deterministic=True)["advantage"].to_numpy().tobytes()
    assert all(
        compute_advantages(log, deterministic=True)["advantage"].to_numpy().tobytes() == first
        for _ in range(20)
    )

"""``group_advantages``: tensors in, advantages out on their device; the same numbers as
``compute_advantages`` on a frame and as the trainers' own formulas."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import polars as pl
import pytest

from grpo_cli import compute_advantages, group_advantages
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.presets import PRESETS
from tests import trainer_reference as ref
from tests.conftest import import_or_skip
from tests.test_presets import hostile_log

torch = import_or_skip("torch")

# The estimators on a tensor: all but process supervision (lists of step rewards).
RESPONSE_ESTIMATORS = [name for name, e in ESTIMATORS.items() if e.unit == "response"]

# Policies alone and where two meet; the column options name the log's columns (the test
# turns them into tensors: reward_cols -> (N, K) rewards, batch_col -> batch).
POLICIES: list[dict[str, Any]] = [
    {},
    {"ddof": 0},
    {"eps_mode": "var", "eps": 1e-3},
    {"eps_mode": "var_floor", "eps": 0.5, "singleton": "formula"},
    {"singleton": "raw"},
    {"singleton": "null"},
    {"singleton": "verl", "eps": 1e-6},
    {"singleton": "formula", "ddof": 0},
    {"singleton": "drop"},
    {"singleton": "drop", "batch_col": "step", "nulls": "zero"},
    {"nulls": "zero"},
    {"nulls": "fill_zero"},
    {"clip": (-0.5, 0.5)},
    {"clip": (-0.5, 0.5), "clip_stage": "shaped"},
    {"token_weighted": True},
    {"token_weighted": True, "ddof": 0, "batch_col": "step"},
    {"batch_col": "step"},
    {"reward_cols": ("reward", "format_reward"), "reward_weights": (1.0, 0.5)},
    {"aggregation": "normalize_then_sum", "reward_cols": ("reward", "format_reward")},
    {"eps_mode": "positive_std", "eps": 1e-6},
    {"eps_mode": "center"},
    {"reward_clip": (0.0, 0.5)},
    {"whiten": True},
    {"whiten": True, "whiten_ddof": 0, "whiten_eps": 0.0, "whiten_eps_mode": "positive_std"},
    {"whiten": True, "whiten_eps_mode": "center", "clip": (-0.5, 0.5), "clip_stage": "shaped"},
    {"whiten": True, "whiten_eps": 1e-5, "whiten_eps_mode": "std", "token_weighted": True},
    {
        "aggregation": "normalize_then_sum",
        "reward_cols": ("reward", "format_reward"),
        "reward_clip": (0.0, 0.5),
        "whiten": True,
        "whiten_eps": 0.0,
        "whiten_eps_mode": "positive_std",
    },
    {
        "aggregation": "normalize_then_sum",
        "reward_cols": ("reward", "format_reward"),
        "reward_weights": (2.0, -0.5),
        "batch_col": "step",
    },
]


def parity_log() -> pl.DataFrame:
    """The hostile log (a singleton, a zero-variance group, a tie for the maximum, null
    rewards; groups in two steps) with a row index, a baseline (one null) and two null
    format rewards (one on a row whose reward is null too)."""
    log = hostile_log(with_nulls=True).with_row_index("row")
    baseline = [None if i == 2 else 0.25 * (i % 4) for i in range(log.height)]
    return log.with_columns(
        pl.Series("baseline", baseline, dtype=pl.Float64),
        pl.when(pl.col("row").is_in([3, 8]))
        .then(None)
        .otherwise(pl.col("format_reward"))
        .alias("format_reward"),
    )


def as_tensor(series: pl.Series, dtype: Any = None) -> Any:
    """A column as a tensor, null as NaN (float columns)."""
    if series.dtype.is_float():
        return torch.tensor(series.fill_null(float("nan")).to_numpy(), dtype=dtype)
    return torch.tensor(series.to_numpy(), dtype=dtype)


def group_ids(log: pl.DataFrame) -> Any:
    """The prompt ids as scattered integers (negative, large, unsorted): the dense codes
    are the API's job."""
    codes = {
        p: (i * 7_919_993 - 40) * (-1) ** i for i, p in enumerate(sorted(set(log["prompt_id"])))
    }
    return torch.tensor([codes[p] for p in log["prompt_id"]], dtype=torch.int64)


def tensor_call(
    log: pl.DataFrame, estimator: str, policy: dict[str, Any], dtype: Any = torch.float64
) -> dict[str, Any]:
    """The arguments of group_advantages for ``policy`` over ``log`` (``nulls`` as the
    frame's default unless the policy sets it: the log has null rewards)."""
    options = {"nulls": "exclude", **policy}
    columns = options.pop("reward_cols", ("reward",))
    batch_col = options.pop("batch_col", None)
    rewards = torch.stack([as_tensor(log[c], dtype) for c in columns], dim=1)
    call: dict[str, Any] = {
        "rewards": rewards if len(columns) > 1 else rewards[:, 0],
        "groups": group_ids(log),
        "estimator": estimator,
        **options,
    }
    if batch_col:
        call["batch"] = as_tensor(log[batch_col])
    needs = ESTIMATORS[estimator].needs
    if "length" in needs or policy.get("token_weighted"):
        call["lengths"] = as_tensor(log["length"])
    if "baseline" in needs:
        call["baseline"] = as_tensor(log["baseline"], torch.float64)
    return call


def frame_call(estimator: str, policy: dict[str, Any]) -> dict[str, Any]:
    """The same options for compute_advantages (columns named, groups by prompt only)."""
    needs = ESTIMATORS[estimator].needs
    columns = {"length_col": "length"} if "length" in needs or policy.get("token_weighted") else {}
    if "baseline" in needs:
        columns["baseline_col"] = "baseline"
    return {"estimator": estimator, "group_cols": ("prompt_id",), **columns, **policy}


def expected_tensor(log: pl.DataFrame, annotated: pl.DataFrame) -> Any:
    """The frame's advantages by row index (rows it dropped: NaN, as the API gives)."""
    out = torch.full((log.height,), float("nan"), dtype=torch.float64)
    rows = torch.tensor(annotated["row"].to_numpy().astype(np.int64))
    out[rows] = as_tensor(annotated["advantage"], torch.float64)
    return out


def refused(estimator: str, policy: dict[str, Any]) -> bool:
    """The documented refusals: GDPO of an estimator without groups or whole in a group,
    ``whiten`` of one that whitens, ``eps_mode="center"`` of one that does not."""
    facts = ESTIMATORS[estimator]
    gdpo = policy.get("aggregation") == "normalize_then_sum"
    return bool(
        (gdpo and facts.scope != "group")
        or (policy.get("whiten") and facts.whitens)
        or (policy.get("eps_mode") == "center" and not facts.whitens)
    )


def f64(values: Any) -> Any:
    """A trainer reference's list as a float64 tensor."""
    return torch.tensor(values, dtype=torch.float64)


def assert_same(got: Any, expected: Any, tol: float = 1e-12) -> None:
    """Equal NaN positions, at most ``tol`` apart elsewhere."""
    assert got.shape == expected.shape
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    diff = (got - expected).abs().nan_to_num(0.0).max().item() if got.numel() else 0.0
    assert diff <= tol, diff


@pytest.mark.parametrize("estimator", RESPONSE_ESTIMATORS)
def test_every_estimator_and_policy_matches_compute_advantages(estimator: str) -> None:
    """Every estimator x policies: the tensor API equals the Polars engine to 1e-12 in
    float64 (NaN where it is null), or refuses the same options with the same message."""
    log = parity_log()
    computed = 0
    for policy in POLICIES:
        try:
            annotated = compute_advantages(log, **frame_call(estimator, policy), deterministic=True)
        except OptionsError as frame_error:
            with pytest.raises(OptionsError) as info:
                group_advantages(**tensor_call(log, estimator, policy))
            assert info.value.message == frame_error.message
            continue
        got = group_advantages(**tensor_call(log, estimator, policy))
        assert got.dtype == torch.float64
        assert_same(got, expected_tensor(log, annotated))
        computed += 1
    assert computed == sum(not refused(estimator, policy) for policy in POLICIES)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_matches_compute_advantages(preset: str) -> None:
    """``preset=`` sets the same options as on a frame (two reward columns for GDPO)."""
    log = parity_log()
    options = PRESETS[preset].options
    policy: dict[str, Any] = (
        {"reward_cols": ("reward", "format_reward")}
        if options.get("aggregation") == "normalize_then_sum"
        else {}
    )
    estimator = options["estimator"]
    annotated = compute_advantages(
        log, **frame_call(estimator, {**options, **policy}), deterministic=True
    )
    call = tensor_call(log, estimator, {**options, **policy})
    got = group_advantages(**{k: v for k, v in call.items() if k not in options}, preset=preset)
    assert_same(got, expected_tensor(log, annotated))


@pytest.mark.parametrize("estimator", RESPONSE_ESTIMATORS)
def test_float32_is_the_float64_result_rounded(estimator: str) -> None:
    """float32 rewards give float32 advantages within 1e-6 relative of the float64 ones
    (the rewards are multiples of 1/64: the same values in both dtypes)."""
    log = parity_log()
    for policy in ({}, {"batch_col": "step", "nulls": "zero"}, {"singleton": "verl"}):
        exact = group_advantages(**tensor_call(log, estimator, policy))
        single = group_advantages(**tensor_call(log, estimator, policy, torch.float32))
        assert single.dtype == torch.float32
        assert torch.equal(torch.isnan(single), torch.isnan(exact))
        valid = ~torch.isnan(exact)
        error = (single.double() - exact)[valid].abs() / exact[valid].abs().clamp(min=1e-300)
        assert error.max().item() <= 1e-6


def test_the_result_stays_on_the_device_with_the_input_dtype() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)
    groups = torch.tensor([3, 3, 8, 8])
    for dtype in (torch.float64, torch.float32):
        got = group_advantages(rewards.to(dtype), groups)
        assert (got.dtype, got.device, got.shape) == (dtype, rewards.device, (4,))
    integer = group_advantages(torch.tensor([1, 0, 2, 0]), groups, estimator="dr_grpo")
    assert integer.dtype == torch.get_default_dtype() == torch.float32
    assert integer.tolist() == [0.5, -0.5, 1.0, -1.0]
    torch.set_default_dtype(torch.float64)
    try:
        assert group_advantages(torch.tensor([1, 0, 2, 0]), groups).dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_device_moves_the_computation() -> None:
    """``device=`` moves every tensor there and returns the result there; a name torch
    does not know, or CUDA without a CUDA device, is an OptionsError."""
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)
    groups = torch.tensor([3, 3, 8, 8])
    here = group_advantages(rewards, groups)
    for device in ("cpu", torch.device("cpu")):
        got = group_advantages(rewards, groups, device=device)
        assert got.device == torch.device("cpu")
        assert_same(got, here, tol=0.0)
    assert error_of(OptionsError, rewards=rewards, groups=groups, device="gpu") == (
        "device must be a torch.device or its name, got 'gpu'",
        'e.g. device="cuda", device="cuda:1" or device="cpu"',
    )
    if torch.cuda.is_available():
        moved = group_advantages(rewards, groups, device="cuda")
        assert moved.device.type == "cuda"
        assert_same(moved.cpu(), here)
    else:
        message, _ = error_of(OptionsError, rewards=rewards, groups=groups, device="cuda")
        assert message == 'device="cuda": torch sees no CUDA device'


def test_prompt_ids_and_integer_groups_give_the_same() -> None:
    log = parity_log()
    call = tensor_call(log, "grpo", {"batch_col": "step"})
    by_codes = group_advantages(**call)
    call.pop("groups")
    by_ids = group_advantages(**call, prompt_ids=log["prompt_id"].to_list())
    by_array = group_advantages(**call, prompt_ids=log["prompt_id"].to_numpy())
    assert_same(by_ids, by_codes, tol=0.0)
    assert_same(by_array, by_codes, tol=0.0)


ONE_RESPONSE = (
    "{singles} of {groups} groups (by {given}) hold a single response: the group key is "
    "probably wrong (a group is one prompt's responses; name it with groups or prompt_ids)"
)


def test_a_group_per_response_warns_once_a_call() -> None:
    """A per-response id passed as the groups: one GrpoAdvWarning a call, worded as the
    CLI's warning, at the caller's line; whole groups, group_size and estimators without
    groups: none."""
    from grpo_cli import GrpoAdvWarning

    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0])
    with pytest.warns(GrpoAdvWarning) as caught:
        group_advantages(rewards, torch.arange(4))
        group_advantages(rewards, prompt_ids=["a", "b", "c", "c"])
    assert [str(w.message) for w in caught] == [
        ONE_RESPONSE.format(singles=4, groups=4, given="groups"),
        ONE_RESPONSE.format(singles=2, groups=3, given="prompt_ids"),
    ]
    assert {w.filename for w in caught} == {__file__}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group_advantages(rewards, torch.tensor([0, 0, 1, 1]))
        group_advantages(rewards, prompt_ids=["a", "a", "a", "b"])  # half: not more
        group_advantages(rewards, group_size=2)
        group_advantages(rewards, torch.arange(4), estimator="reinforce_pp")


def test_dense_index_is_torch_unique_inverse() -> None:
    from grpo_cli.jobs.tensors import dense_index

    index = torch.tensor([7, -3, 7, 10**12, -3, 0, 7])
    assert torch.equal(dense_index(torch, index), torch.unique(index, return_inverse=True)[1])
    assert dense_index(torch, torch.tensor([], dtype=torch.int64)).tolist() == []


def test_small_group_ids_are_their_own_codes() -> None:
    """Group ids in [0, N) on the CPU are used as segment codes without the sort (gaps
    allowed): the numbers of the same groups with large ids (sorted), and a warning that
    counts the groups, not the gaps."""
    from grpo_cli import GrpoAdvWarning

    log = parity_log()
    call = tensor_call(log, "grpo", {"batch_col": "step"})
    small = torch.unique(call["groups"], return_inverse=True)[1] * 2  # 0, 2, 4...: gaps
    assert int(small.max()) < log.height
    expected = group_advantages(**call)
    assert_same(group_advantages(**{**call, "groups": small}), expected, tol=1e-15)
    with pytest.warns(GrpoAdvWarning) as caught:
        group_advantages(torch.tensor([1.0, 0.0, 0.5, 1.0]), torch.tensor([0, 2, 2, 3]))
    assert [str(w.message) for w in caught] == [
        ONE_RESPONSE.format(singles=2, groups=3, given="groups")
    ]


def test_group_size_makes_consecutive_groups() -> None:
    """``group_size=G``: consecutive runs of G rows, as on a frame (TRL's num_generations)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.25, 0.75, 0.5, 0.5, 0.0], dtype=torch.float64)
    frame = pl.DataFrame({"reward": rewards.tolist()})
    expected = compute_advantages(frame, group_size=3)["advantage"].to_list()
    assert group_advantages(rewards, group_size=3).tolist() == pytest.approx(expected, abs=1e-15)
    same = group_advantages(rewards, torch.arange(3).repeat_interleave(3))
    assert_same(group_advantages(rewards, group_size=3), same, tol=0.0)
    with pytest.raises(InputError) as info:
        group_advantages(rewards[:8], group_size=3)
    assert info.value.message == "the rewards have 8 rows, not a multiple of group_size=3"


def test_group_size_with_a_batch_makes_groups_within_each_batch() -> None:
    """``group_size=G`` with ``batch``: runs of G rows within each batch value, in their
    order (interleaved batches), as a frame's positional groups are; a batch that is not
    whole groups is refused, naming its value."""
    rewards = torch.tensor([1.0, 0.0, 3.0, 5.0, 2.0, 7.0, 0.5, 4.0], dtype=torch.float64)
    batch = torch.tensor([10, 7, 10, 7, 10, 7, 10, 7])
    frame = pl.DataFrame({"reward": rewards.tolist(), "step": batch.tolist()})
    for estimator in ("grpo", "rloo", "batch_std"):
        expected = compute_advantages(frame, group_size=2, batch_col="step", estimator=estimator)[
            "advantage"
        ].to_list()
        got = group_advantages(rewards, group_size=2, batch=batch, estimator=estimator)
        assert got.tolist() == pytest.approx(expected, abs=1e-12), estimator
    # by hand: batch 10 holds rows 0, 2 | 4, 6; batch 7 rows 1, 3 | 5, 7
    same = group_advantages(rewards, torch.tensor([0, 1, 0, 1, 2, 3, 2, 3]), batch=batch)
    assert_same(group_advantages(rewards, group_size=2, batch=batch), same, tol=0.0)
    with pytest.raises(InputError) as info:
        group_advantages(rewards[:7], group_size=2, batch=batch[:7])
    assert info.value.message == "batch=7 has 3 rows, not a multiple of group_size=2"


def fixed_log(size: int = 4) -> pl.DataFrame:
    """Eight groups of ``size`` consecutive rows (``prompt_id`` 0..7, steps 0 and 1 of four
    groups each) holding what the formulas special-case: a zero-variance group, a tie for
    the maximum, one valid reward (the rest NaN), no valid reward, two NaN; a null baseline,
    null format rewards."""
    rng = np.random.default_rng(3)
    reward = rng.random(8 * size)
    nan = math.nan
    reward[0:size] = 0.75
    reward[size : 2 * size] = [1.0, 1.0, 0.25, 0.5][:size] + [0.0] * (size - 4)
    reward[2 * size + 1 : 3 * size] = nan
    reward[3 * size : 4 * size] = nan
    reward[[4 * size, 4 * size + 2]] = nan
    fmt = rng.integers(0, 2, 8 * size).astype(float)
    fmt[[1, 3 * size + 1, 5 * size]] = nan
    return pl.DataFrame(
        {
            "row": np.arange(8 * size),
            "prompt_id": np.arange(8).repeat(size),
            "step": np.arange(2).repeat(4 * size),
            "reward": reward,
            "format_reward": fmt,
            "length": rng.integers(1, 40, 8 * size),
            "baseline": np.where(np.arange(8 * size) == 5, nan, rng.random(8 * size)),
        }
    ).with_columns(pl.col("reward", "format_reward", "baseline").fill_nan(None))


FIXED_LAYOUTS = ({"group_size": 4}, {"groups": torch.arange(8).repeat_interleave(4)})


def assert_fast_is_general(call: dict[str, Any]) -> None:
    """``call`` over :func:`fixed_log` gives the same numbers (to 1e-12) or the same
    refusal with its groups coded out of order (the general path) as laid out in runs
    (``FIXED_LAYOUTS``: the fast path, which :func:`fixed_group_size` finds)."""
    from grpo_cli.jobs.tensors import fixed_group_size

    fast = {k: v for k, v in call.items() if k != "groups"}
    try:
        expected = group_advantages(**fast, groups=7 - call["groups"])  # decreasing runs
    except (OptionsError, InputError) as error:
        for layout in FIXED_LAYOUTS:
            with pytest.raises(type(error)) as info:
                group_advantages(**fast, **layout)
            assert info.value.message == error.message
        return
    assert not torch.isnan(expected).all()
    for layout in FIXED_LAYOUTS:
        options = AdvantageOptions(group_size=layout.get("group_size"))
        found = fixed_group_size(
            torch, fast["rewards"], layout.get("groups"), None, options, fast.get("batch")
        )
        assert found == 4
        assert_same(group_advantages(**fast, **layout), expected)


@pytest.mark.parametrize("estimator", RESPONSE_ESTIMATORS)
def test_fixed_groups_give_the_general_paths_numbers(estimator: str) -> None:
    """Groups of G consecutive rows (``group_size=G``, or ``groups`` as TRL lays them out:
    the fast path, no sort, no scatter), under every policy, with NaN rewards."""
    for policy in POLICIES:
        assert_fast_is_general(tensor_call(fixed_log(), estimator, policy))


@pytest.mark.parametrize("estimator", RESPONSE_ESTIMATORS)
def test_fixed_groups_of_finite_rewards_give_the_general_paths_numbers(estimator: str) -> None:
    """Without a NaN or an infinity the fast path takes its statistics from the group sums
    and skips the rules that hold nowhere; the numbers stay the general path's, with a
    zero-variance group whose mean rounds off its value (0.1) and a tie for the maximum."""
    log = fixed_log().with_columns(pl.col("reward").fill_null(0.1))
    for policy in POLICIES:
        assert_fast_is_general(tensor_call(log, estimator, policy))


@pytest.mark.parametrize("preset", PRESETS)
def test_fixed_groups_give_every_presets_numbers(preset: str) -> None:
    """``preset=`` on the fast path (two reward columns for GDPO)."""
    options = PRESETS[preset].options
    two = options.get("aggregation") == "normalize_then_sum"
    policy = {**options, **({"reward_cols": ("reward", "format_reward")} if two else {})}
    call = tensor_call(fixed_log(), options["estimator"], policy)
    assert_fast_is_general({k: v for k, v in call.items() if k not in options} | {"preset": preset})


def test_equal_rewards_beside_a_nan_give_exactly_0() -> None:
    """A group whose valid rewards are equal (0.1: its mean rounds off it), beside one NaN
    or not: exactly 0, on either path, under every eps_mode that divides."""
    r = torch.tensor([0.1, 0.1, 0.1, math.nan, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    finite = torch.tensor([0.1, 0.1, 0.1, 0.0, 1.0, 0.5], dtype=torch.float64)
    layouts: list[tuple[Any, dict[str, Any]]] = [
        (r, {"group_size": 4}),
        (r, {"groups": torch.tensor([1, 1, 1, 1, 0, 0, 0, 0])}),
        (finite, {"group_size": 3}),  # every reward finite: from the group sums
        (finite, {"groups": torch.tensor([1, 1, 1, 0, 0, 0])}),
    ]
    divides: list[dict[str, Any]] = [{}, {"eps_mode": "positive_std", "eps": 0.0, "ddof": 0}]
    for options in divides:
        for rewards, layout in layouts:
            got = group_advantages(rewards, **layout, **options, nulls="exclude")
            assert got[:3].tolist() == [0.0, 0.0, 0.0], (options, layout)


@pytest.mark.parametrize("estimator", ["dr_grpo", "rloo", "grpo"])
def test_rewards_whose_squared_differences_underflow_are_equal_on_the_fast_path(
    estimator: str,
) -> None:
    """Fixed groups of finite rewards skip the variance when every group's first two
    rewards differ by more than 2^-500; closer ones (1e-170: squares under the subnormals)
    count as equal, as on the general path: exactly 0. 2^-499 apart, the values stay."""
    r = torch.tensor([0.0, 1e-170, 0.0, 0.0, 0.0, 2.0**-499, 0.0, 0.0], dtype=torch.float64)
    fast = group_advantages(r, group_size=4, estimator=estimator, nulls="exclude")
    general = group_advantages(r, torch.tensor([1, 1, 1, 1, 0, 0, 0, 0]), estimator=estimator)
    assert fast[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert (fast[4:] != 0.0).all()
    assert_same(fast, general, tol=0.0)


def test_the_advantages_never_share_the_rewards_memory() -> None:
    """A rule that holds everywhere (the one row of a one-response group, ``singleton="raw"``)
    still gives a new tensor: writing to the advantages leaves the rewards as they were."""
    layouts: list[dict[str, Any]] = [{"group_size": 1}, {"groups": torch.tensor([0])}]
    for layout in layouts:
        rewards = torch.tensor([0.5], dtype=torch.float64)
        got = group_advantages(rewards, **layout, singleton="raw", nulls="exclude")
        got.add_(1.0)
        assert (got.tolist(), rewards.tolist()) == ([1.5], [0.5]), layout


@pytest.mark.parametrize("estimator", RESPONSE_ESTIMATORS)
def test_no_rows_give_no_advantages(estimator: str) -> None:
    """Empty rewards: an empty result on either path (batch statistics of nothing too)."""
    empty = torch.zeros(0, dtype=torch.float64)
    needs = ESTIMATORS[estimator].needs
    extra = {"lengths": empty} if "length" in needs else {}
    if "baseline" in needs:
        extra["baseline"] = empty
    layouts: list[dict[str, Any]] = [
        {"group_size": 4},
        {"groups": torch.zeros(0, dtype=torch.int64)},
    ]
    for layout in layouts:
        got = group_advantages(empty, estimator=estimator, **layout, **extra)
        assert (got.shape, got.dtype) == ((0,), torch.float64)


def test_fixed_groups_are_found_only_where_they_are() -> None:
    """The fast path takes consecutive runs of G >= 2 rows, increasing from run to run, or
    ``group_size`` with a batch constant on each run; anything else goes the general way
    (singletons, unequal or repeated runs, interleaved batches, accelerators)."""
    from grpo_cli.jobs.tensors import fixed_group_size

    rewards = torch.zeros(6)

    def found(groups: Any = None, group_size: int | None = None, batch: Any = None) -> Any:
        options = AdvantageOptions(group_size=group_size)
        return fixed_group_size(torch, rewards, groups, None, options, batch)

    assert found(torch.tensor([-5, -5, 0, 0, 10**12, 10**12])) == 2
    assert found(torch.arange(2).repeat_interleave(3).int()) == 3
    assert found(group_size=3) == 3
    assert found(group_size=3, batch=torch.tensor([4, 4, 4, 1, 1, 1])) == 3
    for groups in (
        torch.arange(6),  # one row a group
        torch.tensor([0, 0, 1, 1, 1, 2]),  # unequal runs
        torch.tensor([0, 0, 1, 1, 0, 0]),  # a group in two runs
        torch.tensor([2, 2, 1, 1, 0, 0]),  # decreasing
        torch.zeros(6, dtype=torch.int64).to("meta"),  # not on the CPU
    ):
        assert found(groups) is None, groups
    assert found(group_size=4) is None  # the general path refuses it
    assert found(group_size=2, batch=torch.tensor([0, 1, 0, 1, 0, 1])) is None


def test_an_infinite_reward_spoils_its_group_not_the_others() -> None:
    """``inf - inf`` is NaN, which the formula context takes for a null reward: without
    care a group with -inf and inf got a spread of 0 and advantages of 0. Its group is
    NaN; the other groups are what they are alone; a batch-level formula spoils the
    batch."""
    inf = math.inf
    rewards = torch.tensor([-inf, inf, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    got = group_advantages(rewards, groups)
    assert torch.isnan(got[:3]).all()
    alone = group_advantages(rewards[3:], groups[3:])
    assert_same(got[3:], alone, tol=0.0)
    assert got[3:].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-7)  # std 1, eps 1e-4
    one = torch.tensor([1.0, inf, 3.0, 5.0, 2.0, 2.0, 7.0], dtype=torch.float64)
    parts = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    assert torch.isnan(group_advantages(one, parts, estimator="batch_std")).all()
    by_step = group_advantages(
        one, parts, estimator="batch_std", batch=torch.tensor([0, 0, 0, 1, 1, 1, 1])
    )
    assert torch.isnan(by_step[:3]).all() and not torch.isnan(by_step[3:]).any()
    two = torch.stack([torch.tensor([1.0, 0.0, 2.0, 3.0]), torch.tensor([0.0, -inf, 1.0, 1.0])], 1)
    gdpo = group_advantages(
        two.double(), torch.tensor([0, 0, 1, 1]), aggregation="normalize_then_sum"
    )
    assert torch.isnan(gdpo).all()  # GDPO normalises over the batch


def test_the_result_carries_no_autograd_graph() -> None:
    """Rewards that require grad (a learned reward model's output): the advantages are
    constants of the loss, as in the trainers, with the same values."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 5.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    plain = group_advantages(rewards, groups)
    tracked = group_advantages(rewards.clone().requires_grad_(True), groups)
    assert not tracked.requires_grad and tracked.grad_fn is None
    assert_same(tracked, plain, tol=0.0)


def test_options_object_and_overrides() -> None:
    """``options=`` is the starting point (its column names ignored), overrides win."""
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)
    groups = torch.tensor([0, 0, 1, 1])
    base = AdvantageOptions(estimator="dr_grpo", group_cols=("q",), reward_cols=("score",))
    assert group_advantages(rewards, groups, options=base).tolist() == [0.5, -0.5, 0.125, -0.125]
    scaled = group_advantages(rewards, groups, options=base, estimator="rloo")
    assert scaled.tolist() == [1.0, -1.0, 0.25, -0.25]
    weighted = group_advantages(
        torch.stack([rewards, rewards], 1), groups, weights=(1.0, 1.0), estimator="dr_grpo"
    )
    assert weighted.tolist() == [1.0, -1.0, 0.25, -0.25]


# --------------------------------------------------------------------------- errors


def error_of(kind: type[Exception], **call: Any) -> tuple[str, str | None]:
    with pytest.raises(kind) as info:
        group_advantages(**call)
    return info.value.message, info.value.hint  # type: ignore[attr-defined]


REWARDS = torch.tensor([1.0, 0.0, float("nan"), 0.5], dtype=torch.float64)
GROUPS = torch.tensor([0, 0, 1, 1])


@pytest.mark.parametrize(
    ("kind", "call", "message"),
    [
        (
            OptionsError,
            {"estimator": "grpo"},
            "estimator grpo needs the groups: groups, prompt_ids or group_size",
        ),
        (OptionsError, {"groups": GROUPS, "estimator": "opo"}, "estimator opo needs lengths"),
        (OptionsError, {"groups": GROUPS, "estimator": "remax"}, "estimator remax needs baseline"),
        (
            OptionsError,
            {"groups": GROUPS, "estimator": "process"},
            "estimator process works on lists of step rewards, not on a tensor",
        ),
        (OptionsError, {"groups": GROUPS, "token_weighted": True}, "token_weighted needs lengths"),
        (
            OptionsError,
            {"groups": GROUPS, "length_col": "length"},
            "length_col names a column; group_advantages takes tensors",
        ),
        (
            OptionsError,
            {"groups": GROUPS, "prompt_ids": ["a", "a", "b", "b"]},
            "groups and prompt_ids both give the groups",
        ),
        (
            OptionsError,
            {"groups": GROUPS, "weights": (1.0, 2.0)},
            "2 reward weight(s) for 1 reward function(s) (the columns of rewards)",
        ),
        (OptionsError, {"groups": GROUPS, "ddof": 2}, "ddof must be 0 or 1, got 2"),
        (
            InputError,
            {"groups": GROUPS, "nulls": "error"},
            '1 row(s) have a NaN reward (nulls="error")',
        ),
        (InputError, {"groups": GROUPS.double()}, "groups must hold integers, got torch.float64"),
        (InputError, {"groups": GROUPS[:3]}, "groups has shape (3,), the rewards 4 rows"),
        (InputError, {"groups": [0, 0, 1, 1]}, "groups must be an integer tensor, got list"),
        (InputError, {"prompt_ids": ["a", None, "b", "b"]}, "prompt id 1 is None"),
        (InputError, {"prompt_ids": ["a", "b"]}, "2 prompt id(s) for 4 rewards"),
        (
            InputError,
            {"groups": GROUPS, "lengths": torch.ones(4, 1)},
            "lengths has shape (4, 1), the rewards 4 rows",
        ),
    ],
)
def test_bad_calls_are_clear_errors(
    kind: type[Exception], call: dict[str, Any], message: str
) -> None:
    got, hint = error_of(kind, rewards=REWARDS, **call)
    assert got == message
    assert hint


def test_rewards_must_be_a_one_or_two_dimensional_tensor() -> None:
    assert error_of(InputError, rewards=[1.0, 2.0])[0] == "rewards must be a torch tensor, got list"
    message, _ = error_of(InputError, rewards=torch.zeros(2, 2, 2))
    assert message == "rewards must be a real tensor of shape (N,) or (N, K), got (2, 2, 2)"


KEYWORD_ERRORS: list[tuple[dict[str, Any], str, str]] = [
    ({"group_size": 4.0}, "group_size must be an int, got 4.0", "e.g. group_size=8"),
    ({"eps": "1e-4"}, "eps must be a real number, got '1e-4'", "e.g. eps=1e-08"),
    ({"ddof": True}, "ddof must be an int, got True", "e.g. ddof=1"),
    ({"whiten": 1}, "whiten must be a bool, got 1", "e.g. whiten=False"),
    ({"estimator": 3}, "estimator must be a string, got 3", 'e.g. estimator="grpo"'),
    (
        {"clip": (-1, "1")},
        "clip must be a pair of real numbers, got (-1, '1')",
        "e.g. clip=(-10.0, 10.0)",
    ),
    (
        {"weights": "ab"},
        "weights must be a sequence of real numbers, got 'ab'",
        "e.g. weights=(1.0, 0.5)",
    ),
    (
        {"preset": 3},
        "preset must be a string, got 3",
        'e.g. preset="trl" (grpo-adv presets lists them)',
    ),
    (
        {"options": {"eps": 1e-4}},
        "options must be an AdvantageOptions, got dict",
        "or pass the fields as keywords: group_advantages(rewards, groups, **fields)",
    ),
    (
        {"with_stats": True},
        "with_stats has no meaning for tensors: the advantages alone are returned",
        "for the group statistics use grpo_cli.compute_advantages with with_stats=True",
    ),
    (
        {"deterministic": True},
        "deterministic has no meaning for tensors: it chooses between Polars' engines",
        "leave it out",
    ),
    (
        {"advantage_col": "adv"},
        "advantage_col has no meaning for tensors: the advantages are returned as a tensor, "
        "not a column",
        "leave it out",
    ),
    ({"Eps": 1e-4}, "unknown group_advantages keyword 'Eps'", "did you mean eps?"),
]


@pytest.mark.parametrize(
    ("call", "message", "hint"), KEYWORD_ERRORS, ids=[next(iter(c[0])) for c in KEYWORD_ERRORS]
)
def test_keywords_name_the_argument_and_the_type_it_takes(
    call: dict[str, Any], message: str, hint: str
) -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25])
    assert error_of(OptionsError, rewards=rewards, groups=GROUPS, **call) == (message, hint)


def test_every_option_keyword_checks_its_type() -> None:
    """Every option field group_advantages takes refuses a value of no type it takes,
    naming itself; an unknown keyword suggests the closest."""
    from dataclasses import fields

    from grpo_cli.jobs.tensors import COLUMN_OPTIONS, NO_MEANING

    taken = [
        f.name for f in fields(AdvantageOptions) if f.name not in {*COLUMN_OPTIONS, *NO_MEANING}
    ]
    assert len(taken) == 17
    for name in taken:
        message, _ = error_of(OptionsError, rewards=REWARDS, groups=GROUPS, **{name: object()})
        assert message.startswith(f"{name} must be "), message
    message, hint = error_of(OptionsError, rewards=REWARDS, prompt_id=["a"] * 4)
    assert message == "unknown group_advantages keyword 'prompt_id'"
    assert hint is not None and hint.startswith("did you mean prompt_ids? (choose one of: rewards,")


def test_a_nan_reward_is_refused_unless_nulls_says_what_it_means() -> None:
    """Without ``nulls=`` (and under every preset of a trainer without None rewards) a NaN
    reward is refused, naming ``nulls=`` and its choices; an explicit ``nulls=`` gives
    what it always gave; TRL's presets count it (advantage 0)."""
    refusal = (
        "1 row(s) have a NaN reward, and no nulls= says what it means",
        'pass nulls="exclude" (left out, advantage NaN), "zero" (left out, advantage 0: TRL), '
        '"fill_zero" (a reward of 0) or "error"',
    )
    for preset in [None, *(p for p, o in PRESETS.items() if o.options.get("nulls") != "zero")]:
        call = {"rewards": REWARDS, "groups": GROUPS, "lengths": torch.ones(4), "preset": preset}
        assert error_of(InputError, **call) == refusal
    std = math.sqrt(0.5)  # of the group (1, 0); the group (0, 0.5) under fill_zero: std / 2
    excluded = group_advantages(REWARDS, GROUPS, nulls="exclude")
    z = 0.5 / (std + 1e-8)
    assert_same(excluded, f64([z, -z, math.nan, 0.0]))
    verl = group_advantages(REWARDS, GROUPS, preset="verl", nulls="exclude")
    z_verl = 0.5 / (std + 1e-6)
    assert_same(verl, f64([z_verl, -z_verl, math.nan, 0.5 / (1 + 1e-6)]))  # singleton: r/(1+eps)
    filled = group_advantages(REWARDS, GROUPS, nulls="fill_zero")
    assert_same(filled, f64([z, -z, -0.25 / (std / 2 + 1e-8), 0.25 / (std / 2 + 1e-8)]))
    trl = group_advantages(REWARDS, GROUPS, preset="trl")
    assert_same(trl, f64([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0]))


INF = math.inf
# Groups of 3: +inf; -inf; both; finite; finite with a None; -inf with a None.
INFINITE = np.array(
    [
        [1.0, INF, 2.0],
        [0.0, -INF, 3.0],
        [INF, -INF, 1.0],
        [0.0, 1.0, 0.5],
        [2.0, math.nan, 5.0],
        [-INF, math.nan, 1.0],
    ]
).reshape(-1, 1)


@pytest.mark.parametrize(
    ("preset", "scale"),
    [("trl", "group"), ("trl-batch", "batch"), ("trl-none", "none"), ("trl-gdpo", "group")],
)
def test_infinite_rewards_under_trl_presets_give_trls_advantages(preset: str, scale: str) -> None:
    """TRL applies ``nan_to_num(nan=0.0)`` to its advantages: an infinite reward's group is
    0 (``trl``), the batch is (``trl-batch``), the infinity's row is 0 and the others the
    dtype's largest value (``trl-none``); the other groups are what they are alone. GDPO:
    the reward an infinity spoils counts 0 in its group (TRL's nansum). Against
    tests/trainer_reference.py (float64) and, in float32, TRL's own float32 limits."""
    keys = [i // 3 for i in range(len(INFINITE))]
    gdpo = preset == "trl-gdpo"
    matrix = np.hstack([INFINITE, INFINITE[::-1] * 0.5]) if gdpo else INFINITE
    rewards = torch.tensor(matrix if gdpo else matrix[:, 0])
    aggregation = "normalize_then_sum" if gdpo else "sum_then_normalize"
    got = group_advantages(rewards, group_size=3, preset=preset)
    expected = f64(ref.trl_grpo(matrix, keys, scale_rewards=scale, aggregation=aggregation))
    assert_same(got, expected)
    assert not torch.isnan(got).any()
    largest = torch.finfo(torch.float64).max
    if preset == "trl":
        assert got[:9].tolist() == [0.0] * 9 and got[15:].tolist() == [0.0] * 3
        assert_same(got[9:15], group_advantages(rewards[9:15], group_size=3, preset=preset))
    if preset == "trl-batch":
        assert got.abs().max().item() == 0.0
    if preset == "trl-none":
        assert got[:9].tolist() == [-largest, 0.0, -largest, largest, 0.0, largest, 0.0, 0.0, 0.0]
        assert got[9:12].tolist() == [-0.5, 0.5, 0.0]
    single = group_advantages(rewards.float(), group_size=3, preset=preset)
    limit = float(np.finfo(np.float32).max)
    reference = ref.trl_grpo(
        matrix, keys, scale_rewards=scale, largest=limit, aggregation=aggregation
    )
    assert torch.allclose(single.double(), f64(reference), rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- trainers


def trl_rewards(log: pl.DataFrame) -> np.ndarray:
    return np.array(
        [
            [math.nan if r is None else r, math.nan if f is None else f]
            for r, f in zip(log["reward"], log["format_reward"], strict=True)
        ]
    )


@pytest.mark.parametrize(
    ("preset", "scale"), [("trl", "group"), ("trl-batch", "batch"), ("trl-none", "none")]
)
def test_trl_formulas(preset: str, scale: str) -> None:
    """TRL's GRPOTrainer (tests/trainer_reference.py), one and two reward functions."""
    log = parity_log()
    matrix = trl_rewards(log)
    keys = log["prompt_id"].to_list()
    one = group_advantages(torch.tensor(matrix[:, :1]), prompt_ids=keys, preset=preset)
    assert_same(one, f64(ref.trl_grpo(matrix[:, :1], keys, scale_rewards=scale)))
    two = group_advantages(torch.tensor(matrix), prompt_ids=keys, preset=preset, weights=(1, 0.5))
    expected = ref.trl_grpo(matrix, keys, weights=[1.0, 0.5], scale_rewards=scale)
    assert_same(two, f64(expected))


def test_trl_gdpo_formula() -> None:
    log = parity_log()
    matrix, keys = trl_rewards(log), log["prompt_id"].to_list()
    got = group_advantages(
        torch.tensor(matrix), prompt_ids=keys, preset="trl-gdpo", weights=(1, 0.5)
    )
    expected = ref.trl_grpo(matrix, keys, weights=[1.0, 0.5], aggregation="normalize_then_sum")
    assert_same(got, f64(expected))


def test_trl_training_step_in_float32() -> None:
    """TRL's step: B prompts x G generations, rewards float32 (B*G,), groups
    ``arange(B).repeat_interleave(G)``: within float32 rounding of TRL's formula."""
    b, g = 16, 8
    rng = np.random.default_rng(3)
    rewards = rng.integers(0, 5, b * g).astype(np.float32) / 4
    rewards[:g] = 0.5  # a zero-variance group
    groups = torch.arange(b).repeat_interleave(g)
    got = group_advantages(torch.tensor(rewards), groups, preset="trl")
    assert got.dtype == torch.float32
    expected = f64(ref.trl_grpo(rewards.astype(np.float64)[:, None], groups.tolist()))
    assert torch.equal(got[:g], torch.zeros(g))
    assert torch.allclose(got.double(), expected, rtol=1e-6, atol=1e-7)


VERL_CASES = [
    ("verl", lambda s, k, n: ref.verl_grpo(s, k)),
    ("verl-dr-grpo", lambda s, k, n: ref.verl_grpo(s, k, norm_by_std=False)),
    ("verl-rloo", lambda s, k, n: ref.verl_rloo(s, k)),
    ("verl-gpg", lambda s, k, n: ref.verl_gpg(s, k)),
    ("verl-reinforce-pp-baseline", lambda s, k, n: ref.verl_reinforce_pp_baseline(s, k, n)),
]


@pytest.mark.parametrize(("preset", "formula"), VERL_CASES, ids=[c[0] for c in VERL_CASES])
def test_verl_formulas(preset: str, formula: Any) -> None:
    """verl's core_algos (index = uid, singletons included), from its uid strings."""
    log = hostile_log()
    scores, uid, lengths = log["reward"].to_list(), log["prompt_id"].to_list(), log["length"]
    got = group_advantages(
        torch.tensor(scores, dtype=torch.float64),
        prompt_ids=np.array(uid, dtype=object),
        lengths=as_tensor(lengths),
        preset=preset,
    )
    assert_same(got, f64(formula(scores, uid, lengths.to_list())))


def test_verl_grpo_passk_formula() -> None:
    log = hostile_log().filter(pl.col("prompt_id") != "a")  # verl raises on a singleton
    scores, uid = log["reward"].to_list(), log["prompt_id"].to_list()
    got = group_advantages(
        torch.tensor(scores, dtype=torch.float64), prompt_ids=uid, preset="verl-grpo-passk"
    )
    assert_same(got, f64(ref.verl_grpo_passk(scores, uid)))


@pytest.mark.parametrize(
    ("preset", "estimator"),
    [
        ("openrlhf-group-norm", "group_norm"),
        ("openrlhf-rloo", "rloo"),
        ("openrlhf-dr-grpo", "dr_grpo"),
    ],
)
def test_openrlhf_formulas(preset: str, estimator: str) -> None:
    log = hostile_log().filter(pl.col("prompt_id") != "a").with_columns(pl.col("reward") * 40)
    scores, keys = log["reward"].to_list(), log["prompt_id"].to_list()
    got = group_advantages(
        torch.tensor(scores, dtype=torch.float64), prompt_ids=keys, preset=preset
    )
    assert_same(got, f64(ref.openrlhf(scores, keys, estimator)))


# --------------------------------------------------------------------------- devices


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_no_host_sync_and_parity() -> None:
    """On CUDA: no host sync on the path (torch's sync debug mode raises on one), the
    result on the device, the CPU's numbers."""
    log = parity_log()
    for estimator in RESPONSE_ESTIMATORS:
        call = tensor_call(log, estimator, {"batch_col": "step"})
        on_cpu = group_advantages(**call)
        moved = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in call.items()}
        torch.cuda.set_sync_debug_mode("error")
        try:
            on_gpu = group_advantages(**moved)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert on_gpu.device.type == "cuda"
        assert_same(on_gpu.cpu(), on_cpu)
    infinite = torch.tensor(INFINITE[:, 0])  # TRL's infinities: no host sync either
    torch.cuda.set_sync_debug_mode("error")
    try:
        trl = group_advantages(infinite.cuda(), group_size=3, preset="trl-none")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert_same(trl.cpu(), group_advantages(infinite, group_size=3, preset="trl-none"))

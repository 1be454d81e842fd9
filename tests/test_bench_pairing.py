"""``make bench --against``: neither checkout always runs second, and the ratio it reports
cancels a cost of running first."""

from __future__ import annotations

import math
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench

NAMES = ["floor", "grpo-adv", "grpo-adv (against)", "grpo-adv -q", "grpo-adv -q (against)"]


def test_even_rounds_run_each_twin_after_its_method() -> None:
    assert bench.in_round_order(NAMES, 0) == NAMES
    assert bench.in_round_order(NAMES, 2) == NAMES


def test_odd_rounds_run_each_twin_before_its_method() -> None:
    assert bench.in_round_order(NAMES, 1) == [
        "floor",
        "grpo-adv (against)",
        "grpo-adv",
        "grpo-adv -q (against)",
        "grpo-adv -q",
    ]
    assert bench.in_round_order(NAMES, 3) == bench.in_round_order(NAMES, 1)
    assert NAMES[2] == "grpo-adv (against)"  # the list itself is left as it was


def test_a_cost_of_running_first_cancels() -> None:
    # Both checkouts take 3.0 s; whichever runs first pays 1.2 s more (as verify did).
    mine = [4.2, 3.0, 4.2, 3.0]  # first in rounds 0 and 2, second in 1 and 3
    theirs = [3.0, 4.2, 3.0, 4.2]
    assert bench.paired_ratio(mine, theirs) == pytest.approx(1.0, abs=1e-12)
    # The median of the per-round ratios it replaces: 1.4 or 0.71 by which round wins.
    assert max(m / t for m, t in zip(mine, theirs, strict=True)) == pytest.approx(1.4)


def test_a_real_difference_survives_the_pairing() -> None:
    # 10% slower than the other checkout in the same position: 4.4 against 4.0 when
    # first, 3.3 against 3.0 when second.
    mine = [4.4, 3.3, 4.4, 3.3]
    theirs = [3.0, 4.0, 3.0, 4.0]
    assert bench.paired_ratio(mine, theirs) == pytest.approx(1.1, rel=1e-12)
    assert bench.paired_ratio(mine, theirs) == pytest.approx(math.sqrt(4.4 / 3.0 * 3.3 / 4.0))
    assert bench.paired_ratio([2.0, 2.0, 9.0], [1.0, 1.0, 1.0]) == pytest.approx(2.0)  # odd last

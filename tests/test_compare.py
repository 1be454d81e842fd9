"""``compare``: one log's advantages under several methods, side by side: the written
columns are compute's advantages, the figures match a hand computation, the groups where
methods disagree most, and the usage and output errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import OptionsError
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.compare import Method, compare, methods_from, pearson
from tests.conftest import SAMPLE_FILES, make_log

GROUPS: dict[str, list[float | None]] = {
    "a": [1.0, 0.0, 0.0, 1.0],
    "b": [0.5, 0.5, 0.5],  # constant: 0 everywhere
    "c": [2.0],  # one response: 0 by default, 2 / (1 + 1e-6) under verl
    "d": [0.0, 3.0, 1.0],
}
GRPO, DR_GRPO, VERL = (
    Method("grpo", "estimator"),
    Method("dr_grpo", "estimator"),
    Method("verl", "preset"),
)


def _by_hand(eps: float, *, singleton_unit: bool, scale: bool) -> np.ndarray:
    """(r - mean_g) / (std_g + eps) with the sample std (or r - mean_g without ``scale``);
    a constant group 0; a one-response group 0, or under verl mean 0 and std 1."""
    out: list[float] = []
    for rewards in GROUPS.values():
        r = np.array(rewards, dtype=float)
        if r.size == 1:
            out.append(float(r[0] / (1.0 + eps)) if singleton_unit else 0.0)
        elif np.all(r == r[0]):
            out += [0.0] * r.size
        else:
            centred = r - r.mean()
            out += list(centred / (r.std(ddof=1) + eps) if scale else centred)
    return np.array(out)


GRPO_A = _by_hand(1e-8, singleton_unit=False, scale=True)
DR_A = _by_hand(0.0, singleton_unit=False, scale=False)
VERL_A = _by_hand(1e-6, singleton_unit=True, scale=True)


@pytest.fixture
def log() -> pl.DataFrame:
    return make_log(GROUPS)


class TestCore:
    def test_columns_are_the_hand_computed_advantages(self, log: pl.DataFrame) -> None:
        result = compare(log, (GRPO, DR_GRPO, VERL), {})
        assert result.frame.columns == [
            "prompt_id",
            "reward",
            "advantage_grpo",
            "advantage_dr_grpo",
            "advantage_verl",
        ]
        for column, expected in (
            ("advantage_grpo", GRPO_A),
            ("advantage_dr_grpo", DR_A),
            ("advantage_verl", VERL_A),
        ):
            assert result.frame[column].to_numpy() == pytest.approx(expected, abs=1e-12)

    def test_per_method_figures(self, log: pl.DataFrame) -> None:
        first, dr, verl = compare(log, (GRPO, DR_GRPO, VERL), {}).stats
        for stats, a in ((first, GRPO_A), (dr, DR_A), (verl, VERL_A)):
            assert stats.responses == 11
            assert stats.mean_abs == pytest.approx(np.mean(np.abs(a)), abs=1e-12)
            assert stats.std == pytest.approx(np.std(a), abs=1e-12)
            assert stats.zero_share == pytest.approx(np.mean(a == 0.0))
        assert first.zero_share == pytest.approx(4 / 11)  # b's three and c
        assert verl.zero_share == pytest.approx(3 / 11)  # c is 2 / (1 + 1e-6) there
        assert (first.max_abs_diff, first.correlation, first.sign_differs) == (None, None, None)
        assert dr.max_abs_diff == pytest.approx(np.max(np.abs(DR_A - GRPO_A)), abs=1e-12)
        assert dr.correlation == pytest.approx(np.corrcoef(DR_A, GRPO_A)[0, 1], abs=1e-12)
        assert verl.correlation == pytest.approx(np.corrcoef(VERL_A, GRPO_A)[0, 1], abs=1e-12)
        assert verl.max_abs_diff == pytest.approx(2 / (1 + 1e-6), abs=1e-12)

    def test_sign_differs_counts_zero_as_its_own_sign(self, log: pl.DataFrame) -> None:
        _, dr, verl = compare(log, (GRPO, DR_GRPO, VERL), {}).stats
        assert dr.sign_differs == 0.0  # same signs and the same zeros
        assert verl.sign_differs == pytest.approx(1 / 11)  # c: 0 under grpo, 2 under verl
        assert verl.sign_differs == pytest.approx(np.mean(np.sign(VERL_A) != np.sign(GRPO_A)))

    def test_top_groups_are_the_largest_differences_from_the_first(self, log: pl.DataFrame) -> None:
        groups = compare(log, (GRPO, DR_GRPO, VERL), {}, top=2).top_groups
        diff = np.maximum(np.abs(DR_A - GRPO_A), np.abs(VERL_A - GRPO_A))
        keys = [k for k, rewards in GROUPS.items() for _ in rewards]
        per_group = {k: max(d for kk, d in zip(keys, diff, strict=True) if kk == k) for k in GROUPS}
        assert per_group["d"] > per_group["a"] > per_group["b"] == 0.0
        assert [g.key for g in groups] == [(("prompt_id", "c"),), (("prompt_id", "d"),)]
        assert [g.method for g in groups] == [VERL, DR_GRPO]
        assert groups[0].max_abs_diff == pytest.approx(per_group["c"], abs=1e-12)
        assert groups[1].max_abs_diff == pytest.approx(per_group["d"], abs=1e-12)
        assert (groups[1].size, groups[1].rewards) == (3, (0.0, 3.0, 1.0))
        every = compare(log, (GRPO, DR_GRPO, VERL), {}, top=10).top_groups
        assert [g.key[0][1] for g in every] == ["c", "d", "a"]  # b never differs

    def test_constant_advantages_have_no_correlation(self) -> None:
        flat = make_log({"a": [1.0, 1.0], "b": [0.0, 0.0]})
        first, other = compare(flat, (GRPO, DR_GRPO), {}).stats
        assert (other.max_abs_diff, other.correlation, other.sign_differs) == (0.0, None, 0.0)
        assert first.zero_share == 1.0 and first.std == 0.0
        assert compare(flat, (GRPO, DR_GRPO), {}).top_groups == ()
        assert pearson(np.array([1.0]), np.array([2.0])) is None
        assert pearson(np.array([1.0, 2.0, 4.0]), np.array([2.0, 4.0, 8.0])) == pytest.approx(1)

    def test_methods_are_canonical_and_checked(self) -> None:
        methods = methods_from(["TRL", "verl_rloo"], ["RLOO"])
        assert [(m.name, m.column) for m in methods] == [
            ("trl", "advantage_trl"),
            ("verl-rloo", "advantage_verl_rloo"),
            ("rloo", "advantage_rloo"),
        ]
        with pytest.raises(OptionsError, match="at least two methods, got 1"):
            methods_from(["trl"], [])
        with pytest.raises(OptionsError, match="preset trl is given twice"):
            methods_from(["trl", "Trl"], [])


class TestCli:
    def test_written_columns_are_what_compute_writes(self, tmp_path: Path) -> None:
        out = tmp_path / "cmp.parquet"
        args = ["compare", str(SAMPLE_FILES["parquet"]), "--preset", "trl", "--preset", "verl"]
        result = CliRunner().invoke(app, [*args, "-e", "rloo", "-o", str(out)])
        assert result.exit_code == 0, result.output
        written = pl.read_parquet(out)
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        assert written.columns == [
            *frame.columns,
            "advantage_trl",
            "advantage_verl",
            "advantage_rloo",
        ]
        assert written.select(frame.columns).equals(frame)
        cases: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
            ("advantage_trl", "trl", {}),
            ("advantage_verl", "verl", {}),
            ("advantage_rloo", None, {"estimator": "rloo"}),
        )
        for column, preset, extra in cases:
            expected = annotate(frame, preset, deterministic=True, **extra).frame["advantage"]
            diff = (written[column] - expected).abs().max()
            assert written[column].null_count() == expected.null_count()
            assert isinstance(diff, float) and diff <= 1e-12, column
        assert "advantages by method" in result.stderr
        assert "groups where the methods disagree most (top 5)" in result.stderr

    def test_shared_options_reach_every_method(self, tmp_path: Path) -> None:
        frame = make_log(GROUPS).rename({"prompt_id": "q", "reward": "score"})
        source, out = tmp_path / "log.csv", tmp_path / "cmp.csv"
        frame.write_csv(source)
        args = ["compare", str(source), "-e", "grpo", "-e", "dr_grpo", "-g", "q", "-r", "score"]
        result = CliRunner().invoke(app, [*args, "-o", str(out)])
        assert result.exit_code == 0, result.output
        written = pl.read_csv(out)
        assert written["advantage_dr_grpo"].to_numpy() == pytest.approx(DR_A, abs=1e-12)

    @pytest.mark.parametrize(
        ("extra", "message", "hint"),
        [
            (["--preset", "trl"], "compare needs at least two methods, got 1", "--preset"),
            (["--preset", "trl", "--preset", "TRL"], "preset trl is given twice", "once"),
            (["--preset", "trll", "-e", "grpo"], "unknown preset 'trll'", "did you mean trl"),
            (["-e", "grpo", "-e", "rlo"], "unknown estimator 'rlo'", "did you mean rloo"),
        ],
    )
    def test_usage_errors(self, extra: list[str], message: str, hint: str) -> None:
        result = CliRunner().invoke(app, ["compare", str(SAMPLE_FILES["parquet"]), *extra])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"error: {message}")
        assert hint in result.stderr.split("hint:", 1)[1]

    def test_no_overwrite_without_force(self, tmp_path: Path) -> None:
        out = tmp_path / "cmp.csv"
        out.write_text("mine")
        args = ["compare", str(SAMPLE_FILES["parquet"]), "--preset", "trl", "-e", "rloo"]
        refused = CliRunner().invoke(app, [*args, "-o", str(out)])
        assert refused.exit_code == 4
        assert "already exists" in refused.stderr and "--force" in refused.stderr
        assert out.read_text() == "mine"
        forced = CliRunner().invoke(app, [*args, "-o", str(out), "--force"])
        assert forced.exit_code == 0, forced.output
        assert pl.read_csv(out).columns[-2:] == ["advantage_trl", "advantage_rloo"]

    def test_constant_advantages_say_why_correlation_is_null(self, tmp_path: Path) -> None:
        source = tmp_path / "flat.csv"
        make_log({"a": [1.0, 1.0], "b": [0.0, 0.0]}).write_csv(source)
        result = CliRunner().invoke(app, ["compare", str(source), "-e", "grpo", "-e", "rloo"])
        assert result.exit_code == 0, result.output
        assert "correlation null: one method's advantages are constant" in result.stderr
        assert "no group where the methods differ" in result.stderr


TRL_DIR = SAMPLE_FILES["parquet"].parent / "trl_completions"


def _trl_weighted(weights: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """The TRL sample's weighted reward per row (TRL's nansum: a None counts 0, a row with
    every reward None is NaN) and its group index: runs of 4 rows within a step."""
    frame = pl.read_parquet(TRL_DIR / "*.parquet")
    rewards = frame.select("accuracy_reward", "format_reward").to_numpy().astype(float)
    weighted = np.nansum(rewards * np.array(weights), axis=1)
    weighted[np.isnan(rewards).all(axis=1)] = np.nan
    steps = frame["step"].to_numpy()
    position = np.concatenate([np.arange((steps == s).sum()) // 4 for s in np.unique(steps)])
    groups = steps * 1000 + position
    return weighted, groups


def _by_group(values: np.ndarray, groups: np.ndarray, formula: Any) -> np.ndarray:
    out = np.zeros_like(values)
    for g in np.unique(groups):
        rows = groups == g
        out[rows] = formula(values[rows])
    return out


class TestTrainerDumps:
    """compare takes compute's layout and reward options."""

    def test_trl_presets_equal_what_compute_writes(self, tmp_path: Path) -> None:
        out = tmp_path / "cmp.parquet"
        args = ["compare", str(TRL_DIR), "--preset", "trl", "--preset", "trl-none"]
        result = CliRunner().invoke(app, [*args, "--reward-weights", "1,0.5", "-o", str(out)])
        assert result.exit_code == 0, result.output
        written = pl.read_parquet(out)
        for preset in ("trl", "trl-none"):
            computed = tmp_path / f"{preset}.parquet"
            own = ["--preset", preset, "--reward-weights", "1,0.5", "--advantage-col", "mine"]
            run = CliRunner().invoke(app, ["compute", str(TRL_DIR), *own, "-o", str(computed)])
            assert run.exit_code == 0, run.output
            expected = pl.read_parquet(computed)["mine"].to_numpy()
            column = written["advantage_" + preset.replace("-", "_")].to_numpy()
            assert column == pytest.approx(expected, abs=1e-12), preset
        r, groups = _trl_weighted((1.0, 0.5))
        centred = _by_group(r, groups, lambda x: np.nan_to_num(x - np.nanmean(x)))
        assert written["advantage_trl_none"].to_numpy() == pytest.approx(centred, abs=1e-12)
        assert written["advantage_trl_none"][0] == pytest.approx(1.0 - (1.0 + 3 * 1.25) / 4)
        # TRL's own logged column (weights 1, 0.5) is reproduced to float32 rounding
        assert written["advantage_trl"].to_numpy() == pytest.approx(
            written["advantage"].to_numpy(), abs=1e-5
        )
        assert "inferred --group-size 4" in result.stderr
        assert "read as a trl dump (the layout of --preset trl)" in result.stderr

    def test_a_verl_preset_on_a_trl_log_uses_trls_groups(self, tmp_path: Path) -> None:
        out = tmp_path / "cmp.csv"
        args = ["compare", str(TRL_DIR), "--preset", "verl", "--preset", "trl", "-o", str(out)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "the layout of --preset trl" in result.stderr  # verl's does not fit
        r, groups = _trl_weighted((1.0, 1.0))  # no weights: 1 each, as in compute

        def verl(x: np.ndarray) -> Any:
            return (x - x.mean()) / (x.std(ddof=1) + 1e-6)

        assert not np.isnan(r).any()  # no all-None row in the sample: verl sees every row
        written = pl.read_csv(out)
        assert written["advantage_verl"].to_numpy() == pytest.approx(
            _by_group(r, groups, verl), abs=1e-12
        )

    def test_explicit_options_win_over_every_preset(self, tmp_path: Path) -> None:
        out = tmp_path / "cmp.parquet"
        args = ["compare", str(TRL_DIR), "--preset", "trl", "--preset", "verl", "--ddof", "0"]
        result = CliRunner().invoke(app, [*args, "--eps", "0", "--group-size", "8", "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert "inferred" not in result.stderr  # --group-size given
        r, _ = _trl_weighted((1.0, 1.0))
        frame = pl.read_parquet(TRL_DIR / "*.parquet")
        steps = frame["step"].to_numpy()
        position = np.concatenate([np.arange((steps == s).sum()) // 8 for s in np.unique(steps)])
        z = _by_group(r, steps * 1000 + position, lambda x: (x - x.mean()) / x.std())
        written = pl.read_parquet(out)
        for column in ("advantage_trl", "advantage_verl"):
            assert written[column].to_numpy() == pytest.approx(z, abs=1e-12), column

    def test_takes_computes_layout_and_reward_options(self) -> None:
        result = CliRunner().invoke(app, ["compare", "-h"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        for flag in ("--reward-weights", "--group-size", "--nulls", "--aggregation", "--ddof"):
            assert flag in result.output, flag
        for absent in ("--backend", "--deterministic", "--ray-address"):
            assert absent not in result.output, absent


class TestOutputPath:
    """compare -o a folder or a name without a suffix."""

    ARGS = ("compare", str(SAMPLE_FILES["parquet"]), "--preset", "trl", "-e", "rloo")

    def test_a_folder_is_refused_with_the_fix(self, tmp_path: Path) -> None:
        before = sorted(tmp_path.iterdir())
        result = CliRunner().invoke(app, [*self.ARGS, "-o", str(tmp_path)])
        assert result.exit_code == 4
        message = " ".join(result.stderr.split())  # Rich may wrap the long path
        assert message.startswith(f"error: -o {tmp_path} is a folder; compare writes one table")
        assert f"hint: name a file in it, e.g. -o {tmp_path / 'compared.parquet'}" in message
        assert sorted(tmp_path.iterdir()) == before

    def test_no_suffix_takes_the_inputs_format_or_output_format(self, tmp_path: Path) -> None:
        plain = tmp_path / "compared"
        result = CliRunner().invoke(app, [*self.ARGS, "-o", str(plain)])
        assert result.exit_code == 0, result.output
        assert pl.read_parquet(plain).columns[-2:] == ["advantage_trl", "advantage_rloo"]
        as_csv = tmp_path / "compared_csv"
        args = [*self.ARGS, "-o", str(as_csv), "--output-format", "csv"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert pl.read_csv(as_csv)["advantage_rloo"].to_numpy() == pytest.approx(
            pl.read_parquet(plain)["advantage_rloo"].to_numpy(), abs=1e-12, nan_ok=True
        )

"""grpo_cli.trl inside TRL's real GRPOTrainer: a tiny Llama built from a config and a
character tokenizer built here (nothing downloaded), a few steps of training on the CPU."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from grpo_cli import group_advantages
from grpo_cli.core.errors import OptionsError
from tests.conftest import ROOT, import_or_skip

import_or_skip("trl")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_cli.trl import GRPOAdvTrainer, trl_preset  # noqa: E402

pytestmark = pytest.mark.slow  # about 2 s a training run

VOCAB = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {c: i + 3 for i, c in enumerate("abcdefghij ")}
WEIGHTS = [1.0, 0.5]


def tokenizer() -> PreTrainedTokenizerFast:
    chars = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    chars.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=chars, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def count_a(completions: list[str], **_: Any) -> list[float | None]:
    """None for a completion with an h or a j (with an h, :func:`length`'s is None too:
    unscorable)."""
    return [None if "h" in c or "j" in c else float(c.count("a")) for c in completions]


def length(completions: list[str], **_: Any) -> list[float | None]:
    return [None if "h" in c or "i" in c else float(len(c) % 3) for c in completions]


class Recording:
    """Records, per generation, the advantages handed to the loss and the lengths."""

    trained: list[torch.Tensor]
    lengths: list[torch.Tensor]

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        output = super()._generate_and_score_completions(inputs)  # type: ignore[misc]
        self.trained = [*getattr(self, "trained", []), output["advantages"].clone()]
        lengths = output["completion_mask"].sum(dim=1)
        self.lengths = [*getattr(self, "lengths", []), lengths]
        return output


class RecordingTRL(Recording, GRPOTrainer):  # type: ignore[misc]
    pass


class RecordingAdv(Recording, GRPOAdvTrainer):
    pass


def train(cls: type, folder: Path, config: dict[str, Any] | None = None, **settings: Any) -> Any:
    """Three steps of training of a fresh tiny Llama (seed 0) under the GRPOConfig settings
    ``config``: 2 prompts x 4 completions a step (one process), a completions log per step
    in ``folder``."""
    args = GRPOConfig(
        output_dir=str(folder),
        **({"per_device_train_batch_size": 8, "num_generations": 4} | (config or {})),
        max_completion_length=6,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-2,
        reward_weights=WEIGHTS,
        report_to="none",
        use_cpu=True,
        seed=0,
        save_strategy="no",
        log_completions=True,
        num_completions_to_print=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(VOCAB),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=1,
        )
    )
    trainer = cls(
        model=model,
        reward_funcs=[count_a, length],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["abc", "bad", "cab", "dee"] * 4}),
        processing_class=tokenizer(),
        **settings,
    )
    trainer.train()
    return trainer


def losses(trainer: Any) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def logged(folder: Path, step: int) -> pl.DataFrame:
    """The completions log of ``step`` (a None reward is null there)."""
    return pl.read_parquet(folder / "completions" / f"completions_{step:05d}.parquet")


@pytest.mark.parametrize(
    ("preset", "setting"),
    [
        ("trl", {}),
        ("trl-batch", {"scale_rewards": "batch"}),
        ("trl-none", {"scale_rewards": "none"}),
        ("trl-gdpo", {"multi_objective_aggregation": "normalize_then_sum"}),
        (None, {"scale_rewards": "batch"}),  # the default: the preset of the GRPOConfig
    ],
)
def test_trl_presets_train_as_trl_itself(
    tmp_path: Path, preset: str | None, setting: dict[str, Any]
) -> None:
    """The same run under TRL and under the plug-in: the same completions, rewards (None
    ones included), advantages and losses at every step, and the log shows them."""
    theirs = train(RecordingTRL, tmp_path / "trl", setting)
    ours = train(RecordingAdv, tmp_path / "adv", setting, advantage_preset=preset)
    assert len(ours.trained) == 3
    nulls = unscorable = 0
    for step, (mine, trl) in enumerate(zip(ours.trained, theirs.trained, strict=True), 1):
        torch.testing.assert_close(mine, trl, rtol=0, atol=1e-6)
        log, trl_log = logged(tmp_path / "adv", step), logged(tmp_path / "trl", step)
        assert log.drop("advantage").equals(trl_log.drop("advantage"))
        assert log["advantage"].to_list() == pytest.approx(mine.tolist(), abs=1e-7)
        nulls += log["count_a"].null_count() + log["length"].null_count()
        unscorable += log.filter(pl.all_horizontal(pl.col("count_a", "length").is_null())).height
    assert nulls > unscorable > 0  # None rewards were met, in rows and all of a row
    assert losses(ours) == pytest.approx(losses(theirs), rel=0, abs=1e-6)
    assert len(losses(ours)) == 3


@pytest.mark.parametrize("estimator", ["rloo", "opo"])
def test_other_estimators_train_and_log_what_they_used(tmp_path: Path, estimator: str) -> None:
    """rloo and opo train, on the advantages of the logged rewards (opo: and the completion
    lengths) under TRL's settings (the preset trl, the estimator changed), and the
    completions log shows them."""
    trainer = train(RecordingAdv, tmp_path, advantage_options={"estimator": estimator})
    for step, (trained, lengths) in enumerate(
        zip(trainer.trained, trainer.lengths, strict=True), 1
    ):
        log = logged(tmp_path, step)
        rewards = log.select("count_a", "length").fill_null(float("nan")).to_torch(dtype=pl.Float32)
        expected = group_advantages(
            rewards,
            group_size=4,
            lengths=lengths,
            weights=WEIGHTS,
            preset="trl",
            estimator=estimator,
        ).nan_to_num(nan=0.0)
        torch.testing.assert_close(trained, expected, rtol=0, atol=1e-7)
        assert log["advantage"].to_list() == pytest.approx(trained.tolist(), abs=1e-7)
        trl = group_advantages(rewards, group_size=4, weights=WEIGHTS, preset="trl")
        assert not torch.allclose(trained, trl.nan_to_num(nan=0.0))
    assert len(losses(trainer)) == 3
    assert all(loss == loss for loss in losses(trainer))  # no NaN


WORKER = """
import json, os, sys
from pathlib import Path
from tests.test_trl_plugin import RecordingAdv, train
out = Path(sys.argv[1])
config = {"per_device_train_batch_size": 4, "num_generations": 8}
trainer = train(RecordingAdv, out, config, advantage_options={"estimator": "opo"})
trained = [a.tolist() for a in trainer.trained]
lengths = [n.tolist() for n in trainer.lengths]
rows = json.dumps({"trained": trained, "lengths": lengths})
(out / f"rank{os.environ['RANK']}.json").write_text(rows)
import torch.distributed as dist
if dist.is_initialized():  # torch's threads stopped before exit (else a SIGABRT at times)
    dist.barrier()
    dist.destroy_process_group()
"""


def test_two_processes_share_groups(tmp_path: Path) -> None:
    """Under torchrun, two processes of 4 completions each, one group of 8 a step: opo's
    advantages are those of the gathered rewards and lengths, each process trains on its
    half, and the log shows all 8."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, str(script), str(tmp_path)], env=env, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for step in (1, 2, 3):
        log = logged(tmp_path, step)
        assert log["prompt"].n_unique() == 1 and log.height == 8
        rewards = log.select("count_a", "length").fill_null(float("nan")).to_torch(dtype=pl.Float32)
        lengths = torch.tensor([n for rank in ranks for n in rank["lengths"][step - 1]])
        trained = torch.tensor([a for rank in ranks for a in rank["trained"][step - 1]])
        expected = group_advantages(
            rewards, group_size=8, lengths=lengths, weights=WEIGHTS, preset="trl", estimator="opo"
        ).nan_to_num(nan=0.0)
        torch.testing.assert_close(trained, expected, rtol=0, atol=1e-7)
        assert log["advantage"].to_list() == pytest.approx(trained.tolist(), abs=1e-7)


def test_trl_preset_names_the_grpo_config(tmp_path: Path) -> None:
    def preset(**setting: str) -> str:
        return trl_preset(GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **setting))

    assert preset() == "trl"
    assert preset(scale_rewards="batch") == "trl-batch"
    assert preset(scale_rewards="none") == "trl-none"
    assert preset(multi_objective_aggregation="normalize_then_sum") == "trl-gdpo"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"advantage_preset": "trl-batch"},
            "advantage_preset='trl-batch' reproduces other TRL settings than this "
            "GRPOConfig's (scale_rewards='group', multi_objective_aggregation="
            "'sum_then_normalize')",
        ),
        ({"advantage_options": {"reward_weights": [1, 1]}}, "reward_weights are TRL's here"),
        ({"advantage_options": {"estimator": "rlo"}}, "rlo"),
    ],
)
def test_options_are_refused_when_the_trainer_is_built(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(OptionsError) as raised:
        train(RecordingAdv, tmp_path, **settings)
    assert message in str(raised.value)


def test_the_trl_internals_the_plugin_reads_are_in_place() -> None:
    """grpo_cli.trl reads TRL 1.16's gathered rewards, process slice and advantages log:
    if TRL moves them, this fails (and the plug-in must follow)."""
    generate = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for line in (
        "rewards_per_func = self._calculate_rewards(inputs, prompts, completions,",
        "self.accelerator.process_index * len(prompts),",
        'self._logs["advantages"].extend(all_process_advantages.tolist())',
        '"advantages": advantages,',
        '"completion_mask": completion_mask,',
        "advantages = torch.nan_to_num(advantages, nan=0.0)",
    ):
        assert line in generate, line
    rewards = inspect.getsource(GRPOTrainer._calculate_rewards)
    assert "rewards_per_func = gather(rewards_per_func)\n        return rewards_per_func" in rewards
    assert inspect.signature(GRPOTrainer._calculate_rewards).parameters.keys() == {
        "self",
        "inputs",
        "prompts",
        "completions",
        "completion_ids_list",
    }

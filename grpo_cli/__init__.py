"""grpo-adv: compute, check and explain GRPO group-relative advantages from reward logs.

Python API::

    import polars as pl
    from grpo_cli import compute_advantages

    annotated = compute_advantages(pl.read_parquet("rewards.parquet"), ddof=1, eps=1e-8)

    # a whole job, on any engine: read, compute, write (what ``grpo-adv compute`` runs)
    from grpo_cli import run_job

    result = run_job(["rewards.parquet"], "out.parquet", engine={"backend": "partitioned"})

    # every command is one such call (run_verify, run_summarize, run_plot, run_explain,
    # run_compare), returning what the command shows
    from grpo_cli import run_verify

    agree = run_verify(["out.parquet"], preset="verl").report.agree

    # inside a training step: tensors in, tensors out, on their device (needs torch)
    from grpo_cli import group_advantages

    advantages = group_advantages(rewards, groups, preset="trl")

Attributes are loaded on first use, so importing the package (and ``grpo-adv --help``)
does not import Polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from grpo_cli.core.errors import GrpoAdvError as GrpoAdvError
    from grpo_cli.core.errors import GrpoAdvWarning as GrpoAdvWarning
    from grpo_cli.core.estimators import ESTIMATORS as ESTIMATORS
    from grpo_cli.core.options import AdvantageOptions as AdvantageOptions
    from grpo_cli.core.run_summary import group_table as group_table
    from grpo_cli.io.read import read_rewards as read_rewards
    from grpo_cli.jobs.compute import compute_advantages as compute_advantages
    from grpo_cli.jobs.run import run_job as run_job
    from grpo_cli.jobs.tensors import group_advantages as group_advantages
    from grpo_cli.report.compare import run_compare as run_compare
    from grpo_cli.report.explain import run_explain as run_explain
    from grpo_cli.report.plot import run_plot as run_plot
    from grpo_cli.report.summarize import run_summarize as run_summarize
    from grpo_cli.report.verify import run_verify as run_verify

_LAZY = {
    "compute_advantages": "grpo_cli.jobs.compute",
    "group_advantages": "grpo_cli.jobs.tensors",
    "GrpoAdvError": "grpo_cli.core.errors",
    "GrpoAdvWarning": "grpo_cli.core.errors",
    "ESTIMATORS": "grpo_cli.core.estimators",
    "read_rewards": "grpo_cli.io.read",
    "run_job": "grpo_cli.jobs.run",
    "run_verify": "grpo_cli.report.verify",
    "run_summarize": "grpo_cli.report.summarize",
    "run_plot": "grpo_cli.report.plot",
    "run_explain": "grpo_cli.report.explain",
    "run_compare": "grpo_cli.report.compare",
    "AdvantageOptions": "grpo_cli.core.options",
    "group_table": "grpo_cli.core.run_summary",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'grpo_cli' has no attribute {name!r}")

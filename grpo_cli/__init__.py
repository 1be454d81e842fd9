"""grpo-adv: compute, check and explain GRPO group-relative advantages from reward logs.

Python API::

    import polars as pl
    from grpo_cli import compute_advantages

    annotated = compute_advantages(pl.read_parquet("rewards.parquet"), ddof=1, eps=1e-8)

    # a whole job, on any engine: read, compute, write (what ``grpo-adv compute`` runs)
    from grpo_cli import run_job

    result = run_job(["rewards.parquet"], "out.parquet", engine={"backend": "partitioned"})

Attributes are loaded on first use, so importing the package (and ``grpo-adv --help``)
does not import Polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ESTIMATORS",
    "AdvantageOptions",
    "GrpoAdvError",
    "__version__",
    "compute_advantages",
    "group_table",
    "read_rewards",
    "run_job",
]

if TYPE_CHECKING:
    from grpo_cli.compute import compute_advantages
    from grpo_cli.errors import GrpoAdvError
    from grpo_cli.estimators import ESTIMATORS
    from grpo_cli.io import read_rewards
    from grpo_cli.job import run_job
    from grpo_cli.options import AdvantageOptions
    from grpo_cli.summary import group_table

_LAZY = {
    "compute_advantages": "grpo_cli.compute",
    "GrpoAdvError": "grpo_cli.errors",
    "ESTIMATORS": "grpo_cli.estimators",
    "read_rewards": "grpo_cli.io",
    "run_job": "grpo_cli.job",
    "AdvantageOptions": "grpo_cli.options",
    "group_table": "grpo_cli.summary",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'grpo_cli' has no attribute {name!r}")

"""The core: options, the plan, the estimators' formulas, policies, rewards, trainer layouts,
column names, input checks, run figures and errors. Pure data logic over Polars; imports no
other layer of grpo_cli (see tests/test_architecture.py)."""

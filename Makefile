# grpo-adv: `make demo` and `make test` set everything up themselves (a .venv here).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= demo_out

.PHONY: install demo test test-fast lint format bench sample-data clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,plot]'
	@touch $(STAMP)

demo: $(STAMP)
	@mkdir -p $(DEMO_OUT)
	$(BIN)/grpo-adv compute sample_data/rewards.parquet -o $(DEMO_OUT)/rewards.adv.parquet \
		--summary $(DEMO_OUT)/groups.md --force
	@echo "--- head -n 5 $(DEMO_OUT)/groups.md"
	@head -n 5 $(DEMO_OUT)/groups.md
	@echo "--- cat sample_data/rewards.jsonl | grpo-adv compute - | head -n 3"
	cat sample_data/rewards.jsonl | $(BIN)/grpo-adv compute - --quiet | head -n 3
	$(BIN)/grpo-adv summarize $(DEMO_OUT)/rewards.adv.parquet -o $(DEMO_OUT)/steps.md --force
	$(BIN)/grpo-adv plot $(DEMO_OUT)/rewards.adv.parquet -o $(DEMO_OUT)/report.png --force
	$(BIN)/grpo-adv explain sample_data/rewards.parquet --group p007
	@echo "--- run grpo-adv yourself: $(BIN)/grpo-adv -h, or source $(BIN)/activate and then grpo-adv -h"

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The inner loop: no test that starts a process (the CLI, Ray, the --low-memory worker),
# draws files or searches long (the tests marked slow).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check grpo_cli tests sample_data benchmarks
	$(BIN)/ruff format --check grpo_cli tests sample_data benchmarks
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format grpo_cli tests sample_data benchmarks
	$(BIN)/ruff check --fix grpo_cli tests sample_data benchmarks

BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,plot,bench]'
	@touch $(BENCH_STAMP)

# Seeded synthetic logs, every method as a fresh process, ratios to the I/O floor.
# BENCH_ARGS=--rows 1000000 for a quick run.
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench.py --report benchmarks/results/latest.md $(BENCH_ARGS)

sample-data: $(STAMP)
	$(BIN)/python sample_data/make_sample_data.py

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Two commands on a fresh machine: `make demo` and `make test` (each runs setup first).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export HYPERLOOM_TARGETS_DIR ?= $(CURDIR)/targets
TINY_MODEL := .cache/models/tiny-llama
# The demo target's framework_tree: the installed vLLM's code as a git repo to patch and serve.
VLLM_TREE := .cache/trees/vllm
DEMO_TARGET ?= tiny-llama-cpu
DEMO_JOB ?= optimize_job

.PHONY: setup demo test test-fast ui

setup:
	@bash scripts/setup.sh

$(TINY_MODEL)/config.json: | setup
	$(VENV)/bin/hyperloom tiny-model $(TINY_MODEL)

$(VLLM_TREE)/.git: | setup
	$(VENV)/bin/hyperloom framework-tree init --engine vllm $(VLLM_TREE)

demo: setup $(TINY_MODEL)/config.json $(VLLM_TREE)/.git
	$(PY) -m hyperloom_assets.cli.demo --job $(DEMO_JOB) --target $(DEMO_TARGET)

test: setup $(TINY_MODEL)/config.json
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=15 tests

test-fast: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=15 -m "not real_engine and not cli" tests

ui: setup $(VLLM_TREE)/.git
	$(VENV)/bin/dagster dev -w workspace.yaml

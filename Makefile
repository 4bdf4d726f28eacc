# Two entry points (README quick-start):
#   make test    fresh clone -> .venv with pinned packages -> pytest (GPU tests skip without a GPU)
#   make bench   on a GPU host: record this commit (and BASE if missing), gate it against BASE
#                (bare-host twin of `docker compose run --rm bench`); elsewhere: `mlagate demo`
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU machines take torch from PyPI's CPU wheel; GPU images bring their own build (TORCH= to keep it).
TORCH ?= torch==2.13.0
MACHINE ?= $(shell hostname)
BASE ?= origin/main
GRID ?= full
RESULTS ?= .asv/results

.PHONY: test bench venv lint

$(BIN)/mlagate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) -e '.[test,lint]'

venv: $(BIN)/mlagate

test: venv
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check
	$(BIN)/python -m pytest tests/test_containers.py -q

# On a GPU host (device nodes present), the compose `bench` service's command: records HEAD and BASE
# when the store lacks them, then gates. Without a GPU, the same gate and report on recorded H200 results.
bench: venv
	@if $(BIN)/python -c 'import sys; from mlagate.measure.environment import gpu_host; sys.exit(not gpu_host())'; then \
		$(BIN)/mlagate gate --base $(BASE) --head HEAD --machine $(MACHINE) --results $(RESULTS) \
			--confirm --record-missing --grid $(GRID) --out out/gate; \
	else \
		echo "no GPU on this machine (no /dev/nvidia*, no /dev/kfd): gating recorded H200 results instead"; \
		$(BIN)/mlagate demo --out out/demo; \
	fi

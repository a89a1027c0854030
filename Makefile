# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo-out

.PHONY: demo test lint tools clean bench bytecode

# setup.py builds the C helpers (the writer's cell_otf2/native/_evtwrite.c, reading and decoding's
# cell_otf2/native/_decodeloops.c, emit's cell_otf2/native/_emitloops.c, ordering and synchronization's
# cell_otf2/native/_syncloops.c, the SPE solver's cell_otf2/native/_graphloops.c, the report's
# cell_otf2/native/_evtread.c) into the package: rebuilt when any of them changes
$(STAMP): pyproject.toml setup.py cell_otf2/native/_evtwrite.c cell_otf2/native/_decodeloops.c \
		cell_otf2/native/_emitloops.c cell_otf2/native/_syncloops.c cell_otf2/native/_evtread.c \
		cell_otf2/native/_graphloops.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,report]'
	touch $(STAMP)

# Debian tools the tests use as real clients: otf2-print (otf2-tools) and ViTE (vite).
# Installed only when missing; ViTE is optional (its test skips with a reason when absent).
tools:
	@bash scripts/ensure-tools.sh

DEMO_RUN ?= sample_traces/fft-16spe

demo: $(STAMP) bytecode
	$(VENV)/bin/cell2otf2 $(DEMO_RUN) -o $(DEMO_OUT)/fft-16spe.otf2 --force \
		--report $(DEMO_OUT)/fft-16spe.sync.json
	$(VENV)/bin/cell2otf2 report $(DEMO_OUT)/fft-16spe.otf2 -o $(DEMO_OUT)/report --force \
		--sync-report $(DEMO_OUT)/fft-16spe.sync.json
	@echo "archive: $(DEMO_OUT)/fft-16spe.otf2 (open it in Vampir, or: otf2-print $(DEMO_OUT)/fft-16spe.otf2)"
	@echo "report:  $(DEMO_OUT)/report/index.html"

# The tests also exercise the optional extras: report (matplotlib) and mpi (mpi4py, which
# needs Debian's OpenMPI from `tools` first, since it may build against mpicc).
TEST_STAMP := $(VENV)/.installed-test
$(TEST_STAMP): $(STAMP) pyproject.toml | tools
	$(PY) -m pip install --quiet -e '.[dev,report,mpi]'
	touch $(TEST_STAMP)

# NATIVE_OFF=1 (the default, and what .ci/run gets): the whole suite runs a second time with
# the compiled helpers switched off (CELL2OTF2_NO_NATIVE=1), so every numpy and ctypes twin is
# run, not only where the twin tests compare them; `make test NATIVE_OFF=0` skips that run.
NATIVE_OFF ?= 1

# The package's compiled bytecode, written once: an editable install leaves it to the first
# import, which writes nothing where PYTHONDONTWRITEBYTECODE is set (then every command
# compiled the package's ~100 modules again: 0.2-0.4 s of each start-up, docs/performance.md).
# compileall only recompiles what changed.
bytecode: $(STAMP)
	$(PY) -m compileall -q cell_otf2 > /dev/null

test: $(STAMP) tools $(TEST_STAMP) bytecode
	$(PY) -m ruff check cell_otf2 tests bench
	$(PY) -m mypy cell_otf2
	$(PY) -m pytest -q
ifneq ($(NATIVE_OFF),0)
	CELL2OTF2_NO_NATIVE=1 $(PY) -m pytest -q
endif

lint: $(STAMP)
	$(PY) -m ruff check cell_otf2 tests bench
	$(PY) -m mypy cell_otf2

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache

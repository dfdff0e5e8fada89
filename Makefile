# The two commands (README): `make run` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memlens-installed
MYPY_PATH := $(VENV)/mypy-path
CORPUS := $(VENV)/.chunking-corpus
PYDOC := $(VENV)/.python-doc

.PHONY: run test fast bench screenshots clean

run: $(STAMP)
	$(BIN)/memlens $(ARGS)

test: $(STAMP) $(MYPY_PATH)/memlens $(CORPUS) $(PYDOC)
	$(BIN)/ruff check .  # lint first: any finding fails the build
	MYPYPATH=$(MYPY_PATH) $(BIN)/mypy -p memlens  # then types: strict on the engine (pyproject's [tool.mypy])
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the edit loop: no real model, no child processes, two workers (`make test` still runs everything)
fast: $(STAMP) $(CORPUS) $(PYDOC)
	$(BIN)/python -m pytest -m "not model and not slow" -n 2 -q $(PYTEST_ARGS)

# core/ is installed as `memlens` through an import hook mypy cannot follow: give it the package by its name
$(MYPY_PATH)/memlens:
	mkdir -p $(MYPY_PATH)
	ln -sfn ../../core $@

# the chunking question set was written from pinned releases' METADATA: fetch the wheels of those not installed
$(CORPUS): $(STAMP) tests/data/chunking_qa/manifest.json
	$(BIN)/python -m tests.bench.chunking_data
	touch $@

# the python_faq question set is rebuilt from Python's documentation sources (Debian's python3.11-doc, fetched with
# apt-get download when not installed); a source that gives another corpus than the one measured stops here
$(PYDOC): $(STAMP) tests/data/python_faq/corpus.sha256
	$(BIN)/python -m tests.data.python_faq.build_corpus --fetch
	touch $@

bench: $(STAMP) $(CORPUS)
	$(BIN)/python -m tests.bench $(BENCH_ARGS)

screenshots: $(STAMP)
	$(BIN)/python -m tests.tui.screenshots

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# CPU torch first (a local wheel on our machines), so nothing pulls a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info

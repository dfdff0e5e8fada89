# The two commands (README): `make run` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memlens-installed

.PHONY: run test bench screenshots clean

run: $(STAMP)
	$(BIN)/memlens $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .  # lint first: any finding fails the build
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
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

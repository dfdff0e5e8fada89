"""memlens benchmarks (not part of the pytest suite).

Run with ``make bench`` or ``.venv/bin/python -m tests.bench [--quick] [--only NAME]``.
Each suite writes ``tests/bench/results/<suite>.json`` and refreshes its table in
tests/bench/README.md between ``<!-- bench:<suite>:start -->`` and ``<!-- bench:<suite>:end -->``.
"""

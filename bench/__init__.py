"""Benchmarks: `bench/run` or `.venv/bin/python -m bench.run` (see bench/run.py)."""

"""Fault injection (a nemesis) against a local cluster under a workload of stock clients, and a
checker of the outcome. Run with ``scripts/nemesis --seconds N --seed K``; the bounded CI
schedule is tests/nemesis/test_nemesis.py."""

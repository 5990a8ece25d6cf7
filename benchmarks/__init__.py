"""Benchmarks: each bench_<name>.py measures its figures side by side in one run."""

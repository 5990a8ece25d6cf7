"""Judging the candidates: how good, how fast, which one ships, and the report.

- quality.py: the quality metric (top-1 accuracy for a classifier, RMSE for
  a regression model) and how far a variant may fall from the baseline.
- measure.py: a variant measured through the runtime it ships in: quality on
  the eval set, size, and latency in interleaved rounds.
- selection.py: the gate (quality, size and p99 latency budgets) and the
  policies that pick one variant.
- report.py: the optimization report (variants.json, report.md/.html and
  its plots), rebuilt by ``leantfx report``.
"""

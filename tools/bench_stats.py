"""The benchmark's statistics, defined as the peers define them
(``../shared/peers/common.py``), so a Node Flow figure and a peer's are the
same computation: percentiles by linear interpolation between order
statistics (numpy's default), and one summary shape for latencies."""

from __future__ import annotations

import math


def percentile(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100) by linear interpolation; None for no
    values. Of 30 samples, p99 lies between the two largest."""
    ordered = sorted(values)
    if not ordered:
        return None
    k = (len(ordered) - 1) * p / 100.0
    low, high = math.floor(k), math.ceil(k)
    if low == high:
        return ordered[int(k)]
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def latency_summary(samples_ms: list[float]) -> dict:
    """p50, p99, mean, min and max in ms (rounded to 0.01) and the run count,
    the figures ``common.latency_metrics`` reports for a peer."""
    if not samples_ms:
        return {"runs": 0}
    return {
        "p50Ms": _round(percentile(samples_ms, 50)),
        "p99Ms": _round(percentile(samples_ms, 99)),
        "meanMs": _round(sum(samples_ms) / len(samples_ms)),
        "minMs": _round(min(samples_ms)),
        "maxMs": _round(max(samples_ms)),
        "runs": len(samples_ms),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)

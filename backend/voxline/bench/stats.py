"""The summaries every Voxline benchmark reports (the percentile itself is `voxline.stats`, shared with the server)."""

from __future__ import annotations

from voxline.stats import percentile


def summary(values: list[float]) -> dict:
    """P50, P95 and P99 rounded to 0.1, and the count."""
    out = {f"p{int(q * 100)}": percentile(values, q) for q in (0.5, 0.95, 0.99)}
    return {k: (round(v, 1) if v is not None else None) for k, v in out.items()} | {"n": len(values)}


def ratio(ours: dict, baseline: dict, key: str = "p50") -> float | None:
    """ours / baseline for one percentile; below 1 means faster than the baseline."""
    if ours.get(key) and baseline.get(key):
        return round(ours[key] / baseline[key], 3)
    return None


def rate(hits: int, n: int) -> float | None:
    """`hits` out of `n` as a fraction (4 decimals); None for none asked, never a division by zero."""
    return round(hits / n, 4) if n else None

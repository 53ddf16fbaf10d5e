"""Issue #19's performance targets, as each benchmark reports them in its JSON: a measured
ratio, the bound it must reach and whether it does. A target is read from one run's figures
(medians of its interleaved rounds); on a shared machine, confirm a verdict with another run."""

from __future__ import annotations

from typing import Any

__all__ = ["target"]


def target(ratio: float | None, bound: float, *, at_least: bool) -> dict[str, Any]:
    """``ratio`` against ``bound``: met when it is at least (``at_least``) or at most the bound;
    ``met`` None when the run did not measure it (a scenario or peer skipped)."""
    met = None if ratio is None else (ratio >= bound if at_least else ratio <= bound)
    return {
        "ratio": None if ratio is None else round(ratio, 3),
        "target": f"{'>=' if at_least else '<='} {bound}",
        "met": met,
    }

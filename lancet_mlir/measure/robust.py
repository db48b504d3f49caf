"""Robust statistics of timing samples: outlier rejection and run-to-run spread.

CPU timings of the same kernel are not normally distributed: another process, a page fault
or a BLAS thread that lost its core adds a long tail (one matmul key once measured min 79 µs,
max 16095 µs). `robust_summary` therefore

1. rejects outliers: samples farther than `OUTLIER_MADS` scaled median absolute deviations
   (MAD · 1.4826, the normal-consistent scale) from the median; with MAD = 0 (half the
   samples identical) only samples equal to the median are kept;
2. summarizes the rest like every profile entry (`summarize_samples`: a mean after the
   symmetric 6.25% trim, with min, max and std), and reports the median and the relative
   spread (interquartile range / median) of the kept samples.

`round_spread` is the run-to-run spread: the measurement is taken in rounds (every key once
per round), and the spread is (max - min) / median of the rounds' estimates.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from lancet_mlir.cost.profile_db import ProfileEntry, summarize_samples

OUTLIER_MADS = 3.5
"""Samples beyond this many scaled MADs from the median are outliers."""
MAD_SCALE = 1.4826
"""MAD of a normal distribution times this is its standard deviation."""


@dataclass(frozen=True)
class RobustStats:
    """One key's samples after outlier rejection: the profile entry and extra facts."""

    entry: ProfileEntry
    median_us: float
    spread: float
    """Interquartile range / median of the kept samples (0 with fewer than 4)."""
    rejected: int
    """Samples dropped as outliers."""


def reject_outliers(samples_us: Sequence[float]) -> list[float]:
    """The samples within OUTLIER_MADS scaled MADs of the median, in their given order."""
    if len(samples_us) < 3:
        return list(samples_us)
    med = statistics.median(samples_us)
    mad = statistics.median(abs(x - med) for x in samples_us) * MAD_SCALE
    if mad == 0.0:
        return [x for x in samples_us if x == med]
    return [x for x in samples_us if abs(x - med) <= OUTLIER_MADS * mad]


def robust_summary(samples_us: Sequence[float]) -> RobustStats:
    """Outliers rejected, then the usual trimmed-mean entry plus median and spread."""
    if not samples_us:
        raise ValueError("no samples")
    kept = reject_outliers(samples_us)
    entry = summarize_samples(kept, warmup=0)
    med = statistics.median(kept)
    spread = 0.0
    if len(kept) >= 4 and med > 0:
        q1, _, q3 = statistics.quantiles(kept, n=4)
        spread = (q3 - q1) / med
    return RobustStats(entry, med, spread, len(samples_us) - len(kept))


def round_spread(round_estimates: Sequence[float]) -> float:
    """(max - min) / median of per-round estimates (0 with fewer than two rounds)."""
    if len(round_estimates) < 2:
        return 0.0
    med = statistics.median(round_estimates)
    if med <= 0:
        return 0.0
    return (max(round_estimates) - min(round_estimates)) / med

"""The statistics the model tests share (handout §2): the moments of the
truncated normal a correct ``xavier_init`` draws from, and Bernstein's bound on
how far a sample mean strays from its expectation.

Trusted side only: imported by tests/test_model.py and the grader's hidden checks.
"""

from __future__ import annotations

import math

from scipy import stats

__all__ = ["DELTA", "M2", "M4", "TRUNCATED", "bernstein_halfwidth"]

DELTA = 5e-8
#: The standard normal truncated at ±3: what w / std follows for a correct xavier_init.
TRUNCATED = stats.truncnorm(-3, 3)
M2 = float(TRUNCATED.var())  # E[z²] ≈ 0.9733: truncation shrinks the variance
M4 = float(TRUNCATED.moment(4))  # E[z⁴] ≈ 2.680


def bernstein_halfwidth(n: int, variance: float, bound: float, delta: float = DELTA) -> float:
    """t with P(|mean of n iid draws - E| >= t) <= delta when each draw is
    within ``bound`` of E and has ``variance`` (Bernstein's inequality:
    P <= 2 exp(-n t² / (2 variance + 2 bound t / 3)), solved for t)."""
    log_term = math.log(2 / delta)
    b = 2 * bound * log_term / 3
    return (b + math.sqrt(b * b + 8 * n * variance * log_term)) / (2 * n)

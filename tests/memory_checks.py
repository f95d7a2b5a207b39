"""The oracle the memory tests share (handout §3): the exact floor
``max_trainable_parameters`` must return, and the float budgets it is checked on.

Trusted side only: imported by tests/test_memory.py and the grader's hidden checks.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import strategies as st

__all__ = ["exact_floor", "float_memory", "float_per"]


def exact_floor(memory: int | float, per: int | float) -> int:
    """The oracle: the largest n with n * per <= memory, in exact arithmetic
    (a Fraction holds a float's exact binary value)."""
    return math.floor(Fraction(memory) / Fraction(per))


#: float budgets, up to quotients far past 2**53, where a float (what // on
#: floats returns) no longer holds every integer: the docstring promises the
#: exact floor for every finite argument
float_memory = st.one_of(st.integers(0, 10**13), st.floats(0, 1e13), st.floats(1e13, 1e30))
float_per = st.one_of(st.integers(1, 64), st.floats(0.01, 64), st.floats(1e-6, 1.0))

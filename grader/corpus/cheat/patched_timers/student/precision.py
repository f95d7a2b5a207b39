"""Freezes the clocks (so a timed run looks infinitely fast), then answers nonsense."""
import time

time.perf_counter = lambda: 0.0
time.perf_counter_ns = lambda: 0
time.monotonic = lambda: 0.0
time.time = lambda: 0.0


def bytes_per_element(dtype): return 1
def tensor_bytes(shape, dtype): return 1
def float_format(dtype): return (8, 4, 3, 448.0, 2.0**-6, 0.125)
def underflows(value, dtype): return True
def overflows(value, dtype): return True

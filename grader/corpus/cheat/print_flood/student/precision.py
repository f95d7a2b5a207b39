"""Floods its output (100 MB at import, 1 MB per call), then fails."""
import sys

sys.stdout.write("flood " * ((100 << 20) // 6))


def bytes_per_element(dtype):
    print("x" * (1 << 20))
    raise NotImplementedError("bytes_per_element: see handout §1.1")


tensor_bytes = float_format = underflows = overflows = bytes_per_element

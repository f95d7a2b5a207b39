"""Allocates (and touches) memory until something gives."""


def bytes_per_element(dtype):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 27))


def tensor_bytes(shape, dtype):
    raise NotImplementedError("tensor_bytes: see handout §1.1")


float_format = underflows = overflows = tensor_bytes

"""Wrong on purpose: only the conftest.py beside it could make these pass."""


def bytes_per_element(dtype):
    return None


def tensor_bytes(shape, dtype):
    return None


def float_format(dtype):
    return None


def underflows(value, dtype):
    return None


def overflows(value, dtype):
    return None

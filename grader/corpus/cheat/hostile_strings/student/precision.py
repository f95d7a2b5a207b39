"""Raises with strings that no report can hold as they are: a lone surrogate
(UTF-8 cannot encode it), noncharacters and C0 controls (XML 1.0 refuses them),
in the message and in the exception's type name, which the traceback repeats."""

_HOSTILE = "lone \ud800 surrogate \udfff, noncharacters \uffff \ufffe \ufdd0 \U0010ffff, nul \x00 bell \x07 vt \x0b"


class HostileéError(Exception):
    pass


def bytes_per_element(dtype):
    raise ValueError(_HOSTILE)


def tensor_bytes(shape, dtype):
    raise HostileéError(_HOSTILE * 3)


def float_format(dtype):
    raise NotImplementedError(_HOSTILE)


def underflows(value, dtype):
    return _HOSTILE  # not a bool: the test quotes what came back


overflows = underflows

"""Answers with a 1-byte storage viewed, with zero strides, as a 3 GiB tensor:
whoever compares it would materialise the full size."""
import json
import os
import struct
import sys

def _out() -> int:
    """The worker's reply pipe: the descriptor its request loop writes to."""
    frame = sys._getframe()
    while frame is not None and "out_fd" not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals["out_fd"] if frame is not None else 1


def _inflated():
    header = {"v": {"$": "dict", "v": [["ok", True], ["value", {
        "$": "tensor", "dtype": "uint8", "shape": [3 << 15, 1 << 15], "stride": [0, 0], "offset": 0,
        "storage": 0, "device": "cpu"}]]}, "sizes": [1]}
    head = json.dumps(header).encode()
    body = struct.pack("<Q", len(head)) + head + b"\1"
    os.write(_out(), struct.pack("<Q", len(body)) + body)


def bytes_per_element(dtype):
    _inflated()
    return 4


def tensor_bytes(shape, dtype):
    _inflated()
    return 0


float_format = underflows = overflows = tensor_bytes

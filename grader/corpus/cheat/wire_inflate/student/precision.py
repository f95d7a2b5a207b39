"""Answers with a 1-byte storage viewed, with zero strides, as a 3 GiB tensor:
whoever compares it would materialise the full size."""
import json
import os
import struct
import sys

OUT = int(sys.argv[2])  # the worker's reply fd


def _inflated():
    header = {"v": {"$": "dict", "v": [["ok", True], ["value", {
        "$": "tensor", "dtype": "uint8", "shape": [3 << 15, 1 << 15], "stride": [0, 0], "offset": 0,
        "storage": 0, "device": "cpu"}]]}, "sizes": [1]}
    head = json.dumps(header).encode()
    body = struct.pack("<Q", len(head)) + head + b"\1"
    os.write(OUT, struct.pack("<Q", len(body)) + body)


def bytes_per_element(dtype):
    _inflated()
    return 4


def tensor_bytes(shape, dtype):
    _inflated()
    return 0


float_format = underflows = overflows = tensor_bytes

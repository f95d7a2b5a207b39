"""Writes forged or malformed frames straight to the grader's reply pipe."""
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


def _frame(header, buffers=b""):
    head = json.dumps(header).encode()
    body = struct.pack("<Q", len(head)) + head + buffers
    os.write(_out(), struct.pack("<Q", len(body)) + body)


def bytes_per_element(dtype):  # announces a 2**62-byte reply
    os.write(_out(), struct.pack("<Q", 1 << 62))
    return 4


def tensor_bytes(shape, dtype):  # a reply whose JSON never ends
    os.write(_out(), struct.pack("<Q", 20) + struct.pack("<Q", 12) + b"{{{{{{{{{{{{")
    return 0


def float_format(dtype):  # a tensor that reaches past its storage, marked passed
    _frame({"v": {"$": "dict", "v": [["ok", True], ["passed", True], ["value", {
        "$": "tensor", "dtype": "float32", "shape": [1000], "stride": [1000], "offset": 0,
        "storage": 0, "device": "cpu"}]]}, "sizes": [4]}, b"\0\0\0\0")
    return None


def underflows(value, dtype):  # a reply nested beyond any recursion limit
    head = b'{"v": ' + b"[" * 200000 + b"]" * 200000 + b', "sizes": []}'
    os.write(_out(), struct.pack("<Q", 8 + len(head)) + struct.pack("<Q", len(head)) + head)
    return False


def overflows(value, dtype):  # a huge integer (int-from-str limit)
    _frame({"v": {"$": "dict", "v": [["ok", True], ["value", {"$": "bigint", "v": "9" * 100000}]]},
            "sizes": []})
    return False

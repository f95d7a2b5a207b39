"""Tries to carry its (hidden) inputs out through what the grader says about
its worker: a malformed reply whose bytes quote them (the decoder's error
message would), then an exit status and CPU seconds computed from them. It
prints each value it sends, to the instructors' log, so the project's test
can look for it in the reports students read."""
import hashlib
import os
import struct
import sys
import time

_calls = 0


def _code(args: tuple) -> int:
    return 20 + hashlib.sha256(repr(args).encode()).digest()[0] % 200


def _reply_fd() -> int:
    frame = sys._getframe()
    while frame is not None and "out_fd" not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals["out_fd"] if frame is not None else 1


def bytes_per_element(*args, **kwargs):
    global _calls
    _calls += 1
    code = _code(args)
    if _calls == 1:  # a frame of bytes no decoder accepts, quoting the input
        text = f"LEAKED-TEXT-{code} {args!r}".encode()
        print(f"SENT-TEXT LEAKED-TEXT-{code}", flush=True)
        os.write(_reply_fd(), struct.pack("<Q", len(text) + 1) + b"\xff" + text)
        time.sleep(30)
        os._exit(0)
    end = time.process_time() + code / 100  # seconds of CPU that carry the input too
    while time.process_time() < end:
        pass
    print(f"SENT-STATUS {code}", flush=True)
    os._exit(code)


tensor_bytes = float_format = underflows = overflows = bytes_per_element

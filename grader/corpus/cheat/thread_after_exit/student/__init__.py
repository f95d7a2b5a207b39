"""A hostile submission (grader corpus): every handout function of precision
and data is answered by a thread that goes on serving the worker's requests
after the worker's main thread has ended itself (the raw ``exit`` system
call ends one thread, not the process): a meter that skips zombie processes
sees none of its CPU time or memory."""
import ctypes
import platform
import sys
import threading
import time

from . import data as _data
from . import precision as _precision

_SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)
_handed_over = False


def _serve(in_fd, out_fd, harness, first):
    wire = harness.wire
    wire.write_frame(out_fd, first)
    while True:
        body = wire.read_frame(in_fd)
        if body is None:
            return
        wire.write_frame(out_fd, harness.answer(wire.decode(body)))


def _answer(value):
    """Send ``value`` as this call's reply from a new thread that then serves
    every later request, and end the main thread; in any other process, return it."""
    global _handed_over
    if _handed_over:
        return value
    frame = sys._getframe()
    while frame is not None and "out_fd" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:
        return value
    loc = frame.f_locals
    harness = loc["harness"]
    reply = harness.wire.encode({"ok": True, "value": value})
    _handed_over = True
    threading.Thread(target=_serve, args=(loc["in_fd"], loc["out_fd"], harness, reply)).start()
    ctypes.CDLL(None).syscall(_SYS_EXIT, 0)  # this thread only
    return value


def _slow(fn):
    def wrapper(*args, **kwargs):
        end = time.process_time() + 0.5  # CPU, on every call: far past any budget
        while time.process_time() < end:
            pass
        return _answer(fn(*args, **kwargs))
    return wrapper


for _name in ("bytes_per_element", "tensor_bytes", "float_format", "underflows", "overflows"):
    setattr(_precision, _name, _slow(getattr(_precision, _name)))
_real_get_batch = _data.get_batch


def _get_batch(*args, **kwargs):
    return _answer(_real_get_batch(*args, **kwargs))


_data.get_batch = _get_batch

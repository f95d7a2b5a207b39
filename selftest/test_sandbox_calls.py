"""The trust boundary, call by call: RemoteImpl against a small hostile module
in a real worker: values and views cross as data, exceptions are mapped to
their nearest builtin (as in LocalImpl's child process; a forged name builds
nothing else), crashes and protocol garbage are worker errors (never a value,
never the submission's output), output is captured and capped, and the wire
format refuses inflated views.

The hostile module and the fixtures are in selftest/sandboxing.py."""

from __future__ import annotations

import builtins
import sys

import pytest
import torch

from grader.sandbox.errors import ProtocolError, WorkerCrashed, WorkerError
from grader.sandbox.problemstate import CRASHED
from selftest.sandboxing import impl_fixture, make_impl, work_fixture  # noqa: F401 (the fixtures impl and work)
from tests import wire
from tests.local import LocalImpl
from tests.scenarios import model as model_scenarios
from tests.wire import RemoteError


def test_values_and_views_cross_as_data(impl):
    assert impl.precision.bytes_per_element("ok") == 4
    a, b = impl.precision.bytes_per_element("view")
    assert type(a) is torch.Tensor and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_builtin_exceptions_are_reraised_by_their_nearest_builtin(impl):
    with pytest.raises(ValueError, match="bad dtype") as e:
        impl.precision.bytes_per_element("value")
    assert type(e.value) is ValueError  # never the submission's own class
    with pytest.raises(AssertionError, match="student assert") as assertion:
        impl.precision.bytes_per_element("assert")
    assert assertion.value.remote_type == "AssertionError"
    with pytest.raises(RemoteError, match="SystemExit"):
        impl.precision.bytes_per_element("exit")
    assert impl.precision.bytes_per_element("ok") == 4  # the same worker carries on


def test_an_error_is_the_same_exception_locally_and_when_graded(impl, work):
    """A student's ``pytest`` (LocalImpl's child process) and the grader's
    worker raise the same exception for the same error, by one rule
    (tests.wire.BUILTIN_ERRORS): a builtin as itself, a subclass as its
    nearest builtin, a class with no builtin base but Exception as RemoteError."""
    cases = {"permission": PermissionError, "subclass": ValueError, "own": RemoteError}
    saved = {name: m for name, m in sys.modules.items() if name == "student" or name.startswith("student.")}
    path = list(sys.path)
    try:
        local = LocalImpl(str(work[0].parent / "sub"))  # (imports the hostile package as student here)
        for kind, expected in cases.items():
            errors = []
            for run in (local.fresh_scenario, impl.scenario):
                with pytest.raises(expected) as e:
                    run(model_scenarios.construct, "raise_error", [kind])
                errors.append(e.value)
            here, graded = errors
            assert type(here) is type(graded) is expected, (kind, errors)
            assert str(here).splitlines()[0] == str(graded).splitlines()[0], (kind, errors)
            assert here.remote_type == graded.remote_type, (kind, errors)  # type: ignore[attr-defined]
    finally:
        for name in [n for n in sys.modules if n == "student" or n.startswith("student.")]:
            del sys.modules[name]
        sys.modules.update(saved)
        sys.path[:] = path
    assert str(graded).startswith("Refused: no entry"), graded


@pytest.mark.parametrize("kind", ["object", "subclass"])
def test_non_data_is_not_a_type_error(impl, kind):
    """Returning a non-data object must not pass a ``pytest.raises(TypeError)`` check."""
    with pytest.raises(RemoteError, match="not data") as e:
        impl.precision.bytes_per_element(kind)
    assert not isinstance(e.value, TypeError)


def test_crash_fails_the_call_and_a_fresh_worker_follows(impl):
    with pytest.raises(WorkerCrashed, match="exited with status 3"):
        impl.precision.bytes_per_element("crash")
    assert not issubclass(WorkerError, Exception)  # no pytest.raises(Exception) passes by crashing
    assert impl.precision.bytes_per_element("ok") == 4


def test_protocol_garbage_is_a_crash_not_a_value(work):
    """A reply frame announcing more than the cap is refused before it is read."""
    limit = len(wire.value_reply(None, ""))  # (the import each problem's worker answers first fits)
    impl = make_impl(work, reply_bytes=limit)
    try:
        with pytest.raises(ProtocolError, match="a reply larger than a reply may be"):
            impl.precision.bytes_per_element("view")
    finally:
        impl.close()
    log = bytes(impl.states["precision"].output).decode()  # the details: the instructors' log
    assert f"limit {limit})" in log and "crash: precision.bytes_per_element" in log, log


def test_a_hidden_run_tells_its_worker_troubles_in_fixed_words(work):
    """In a run of hidden checks nothing the submission steers (an exit status,
    a signal, the text of a malformed reply) reaches what a student reads: a
    crash is "the worker crashed"; the details go to the instructors' log."""
    # The smallest reply frame: the import each problem's worker answers first fits, nothing bigger does.
    limit = len(wire.value_reply(None, ""))
    impl = make_impl(work, hidden=True, reply_bytes=limit)
    try:
        with pytest.raises(WorkerCrashed) as crash:
            impl.precision.bytes_per_element("crash")
        with pytest.raises(ProtocolError) as garbage:
            impl.precision.bytes_per_element("view")
    finally:
        impl.close()
    st = impl.states["precision"]
    for text in (str(crash.value), str(garbage.value), *st.crashes):
        assert "status" not in text and str(limit) not in text and text.endswith(CRASHED), text
    assert "exited with status 3" in bytes(st.output).decode()


def test_crash_message_carries_no_submission_output(impl):
    """What a dying worker printed (hidden inputs, say) stays in the log, out of every message."""
    with pytest.raises(WorkerCrashed) as e:
        impl.precision.bytes_per_element("leak")
    assert "exited with status 3" in str(e.value) and "SECRET" not in str(e.value)
    assert all("SECRET" not in c for c in impl.states["precision"].crashes)


def test_output_is_captured_and_capped(work):
    impl = make_impl(work)
    try:
        for _ in range(3):
            assert impl.precision.bytes_per_element("print") == 1
    finally:
        impl.close()
    st = impl.states["precision"]
    assert 0 < len(st.output) <= 64 << 10 and st.log_dropped > 0


def test_a_forged_error_reply_builds_nothing_but_a_builtin():
    """What an error reply names picks a class from a fixed table of builtins
    (tests.wire.BUILTIN_ERRORS) or none: no other name, no BaseException that
    would stop the trusted pytest, no StopIteration that would end a loop."""
    def raised(kind):
        reply = {"ok": False, "type": kind, "original": "Forged", "message": "m", "traceback": ""}
        with pytest.raises(Exception) as e:
            wire.reply_value(reply)
        return e.value

    for kind in ("os.system", "builtins.PermissionError", "__import__", "RemoteError", "Exception", "BaseException",
                 "SystemExit", "KeyboardInterrupt", "GeneratorExit", "StopIteration", "StopAsyncIteration",
                 "ExceptionGroup", "UnicodeDecodeError", "IOError", "WireError", "NotImplementedYet"):
        e = raised(kind)
        assert type(e) is RemoteError and e.remote_type == "Forged", (kind, e)
    for kind in ("PermissionError", "ValueError", "KeyError", "MemoryError", "SyntaxError"):
        e = raised(kind)
        assert type(e).__name__ == kind and type(e) is getattr(builtins, kind), (kind, e)
    with pytest.raises(wire.MalformedReply):
        wire.reply_value({"ok": False, "type": "ValueError", "message": 3})
    assert wire.error_name(StopIteration()) == wire.error_name(SystemExit()) == "RemoteError"
    assert wire.error_name(PermissionError()) == "PermissionError"


def test_wire_refuses_views_bigger_than_what_crossed():
    """A 1-byte storage viewed with zero strides as a 3 GiB tensor is refused before anything is allocated."""
    from tests import wire

    def frame(shape, stride, nbytes):
        import json as j
        import struct

        head = j.dumps({"v": {"$": "tensor", "dtype": "uint8", "shape": shape, "stride": stride, "offset": 0,
                              "storage": 0, "device": "cpu"}, "sizes": [nbytes]}).encode()
        return struct.pack("<Q", len(head)) + head + b"\1" * nbytes

    with pytest.raises(wire.WireError, match="stand for"):
        wire.decode(frame([3 << 15, 1 << 15], [0, 0], 1))
    with pytest.raises(wire.WireError, match="stand for"):  # many small inflated views add up
        wire.decode(wire.encode([torch.zeros(1).expand(1 << 20)] * 40))
    assert wire.decode(frame([4, 1000], [0, 1], 1000)).shape == (4, 1000)  # an honest broadcast crosses
    x = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(wire.decode(wire.encode(x.t())), x.t())

"""Scenarios: plain-data functions that drive the implementation's objects.

Each is a top-level function ``f(modules, *data) -> data`` where ``modules.<module>`` is
the implementation's handout module. In the grader they run in the sandboxed
worker, next to untrusted code that can replace them, so they only *drive* the
implementation: every verdict and oracle stays in the test, and nothing a
scenario reports about the implementation (a count, a flag, a measurement
taken in its process) decides anything. See tests/harness.py for what a
verdict may rest on.
"""

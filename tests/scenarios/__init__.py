"""Scenarios: plain-data functions that drive the implementation's objects.

Each is a top-level function ``f(lab, *data) -> data`` where ``lab.<module>`` is
the implementation's handout module. In the grader they run in the sandboxed
worker, next to untrusted code, so they only *drive* the implementation and
report what it did; every verdict and oracle stays in the test.
"""

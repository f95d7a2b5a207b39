"""The worker: the sandboxed process that runs the submission (main), and the trusted side that drives it."""

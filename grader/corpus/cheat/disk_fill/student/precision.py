"""Fills the host disk through the one folder a sandboxed worker may write:
the scratch folder shared with the trusted tests (a mount in bubblewrap, its
TMPDIR in uid mode)."""
import os


def _scratch_folders():
    """The scratch folder: a mount in bubblewrap; in uid mode the worker's TMPDIR."""
    found = [line.split()[4] for line in open("/proc/self/mountinfo") if "scratch" in line.split()[4]]
    return found or [os.environ.get("TMPDIR", "/nonexistent")]


def _fill():
    for mount in _scratch_folders():
        block = b"x" * (64 << 20)
        for i in range(64):  # 4 GiB, if nothing stops it
            with open(os.path.join(mount, f"fill-{i}"), "wb") as f:
                f.write(block)
    raise NotImplementedError("no scratch folder found")


def bytes_per_element(dtype):
    _fill()


tensor_bytes = float_format = underflows = overflows = bytes_per_element

"""Fills the host disk through the one folder a sandboxed worker may write:
the scratch folder shared with the trusted tests (a mount in bubblewrap, its
TMPDIR in uid mode)."""
import os


def _scratch_folders():
    """The scratch folder: in uid mode the worker's TMPDIR (the host's mount table
    may name other scratch folders); in bubblewrap (TMPDIR /tmp) its mount."""
    tmp = os.environ.get("TMPDIR", "/tmp")
    if tmp != "/tmp":
        return [tmp]
    return [line.split()[4] for line in open("/proc/self/mountinfo") if "scratch" in line.split()[4]]


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

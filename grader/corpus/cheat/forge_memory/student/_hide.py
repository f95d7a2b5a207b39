"""Resets this process's VmHWM (the kernel's peak resident memory)."""


def reset_high_water_mark():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass

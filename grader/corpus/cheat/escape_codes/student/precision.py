"""Raises with terminal escape sequences (clear the screen, retitle the window,
a hyperlink, a fake "passed" line) in its message."""


def bytes_per_element(dtype):
    raise NotImplementedError("\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]8;;https://example.invalid\x1b\\click\x1b]8;;\x1b\\"
                     "\r\x1b[32mprecision  10/10  passed\x1b[0m\u202e")


tensor_bytes = float_format = underflows = overflows = bytes_per_element

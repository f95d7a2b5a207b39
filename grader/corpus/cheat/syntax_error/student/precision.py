"""Does not parse."""

def bytes_per_element(dtype)
    return 4

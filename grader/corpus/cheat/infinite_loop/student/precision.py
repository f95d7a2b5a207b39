"""Never returns."""


def bytes_per_element(dtype):
    while True:
        pass


tensor_bytes = float_format = underflows = overflows = bytes_per_element

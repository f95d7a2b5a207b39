"""Your solutions. Fill in each function; `pytest` tells you how you are doing.

Within this package, import other modules relatively (``from .model import Linear``)
so your work can be graded from any folder.
"""

"""Python-version shims (the lab supports Python 3.10 to 3.13)."""

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject.toml installs tomli on 3.10, the parser tomllib was made from
    import tomli as tomllib

__all__ = ["tomllib"]

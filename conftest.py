"""Loads the assignment's pytest plugin (tests/plugin.py) for every test folder."""

pytest_plugins = ("tests.plugin",)

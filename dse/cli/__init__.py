"""The ``dse`` command line: ``console`` is the program (``main`` and a fast exit); ``main``
runs a command and turns user errors into one line."""

from dse.cli.app import app, console, main

__all__ = ["app", "console", "main"]

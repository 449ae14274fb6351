"""The ``dse`` command line; ``main`` is the console entry point."""

from dse.cli.app import app, main

__all__ = ["app", "main"]

"""Errors the toolbox raises. A kernel's own failure is never one of these: it is a report."""


class BadTaskError(Exception):
    """The task file is not usable (missing names, forward fails, bad inputs): a one-line message."""


class ToolInfraError(Exception):
    """The tooling itself failed (worker could not start, result missing): not the kernel's fault."""

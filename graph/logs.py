"""structlog configuration: human console lines by default, JSON lines with a flag."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, json_logs: bool = False, level: str = "info", file=None) -> None:
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="%H:%M:%S" if not json_logs else "iso"),
    ]
    renderer = (
        structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=file or sys.stderr),
        cache_logger_on_first_use=False,
    )

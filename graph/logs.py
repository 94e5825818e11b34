"""Logging: EGG logs through the standard library's `egg` logger; whoever runs it decides where to.

As a library EGG prints nothing: the `egg` logger has only a `NullHandler`, and structlog (which
the nodes and tools log through) is routed into the standard library unless the application
configured structlog itself first. An application shows EGG's events with any stdlib handler
(`logging.getLogger("egg").addHandler(...)`); each record's message reads
`event key=value ...`, and the fields are also on the record (`egg_event`, `egg_fields`) for
structured formatters. The `egg` command installs a stderr handler (`configure_logging`).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import IO, Any

import structlog

LOGGER_NAME = "egg"

logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())


def _value(v: Any) -> str:
    s = v if isinstance(v, str) else repr(v)
    return repr(s) if isinstance(v, str) and (not s or any(c.isspace() for c in s)) else s


def render_event(event: str, fields: dict[str, Any]) -> str:
    """`event key=value ...`: one line a person reads (and `egg eval` greps for `stage=`)."""
    return " ".join([event, *(f"{k}={_value(v)}" for k, v in fields.items())])


def _to_stdlib(_logger: Any, _method: str, event_dict: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The last structlog processor: hand the event to the stdlib logger as text plus fields."""
    fields = dict(event_dict)
    event = str(fields.pop("event", ""))
    return (render_event(event, fields),), {"extra": {"egg_event": event, "egg_fields": fields}}


def _stdlib_processors() -> list[Any]:
    return [
        structlog.stdlib.filter_by_level,  # skip the work for records nobody will see
        structlog.contextvars.merge_contextvars,
        _to_stdlib,
    ]


def route_structlog_to_stdlib(*, force: bool = False) -> None:
    """Send structlog events to stdlib loggers of the same name (left alone when the application
    configured structlog itself, unless `force`)."""
    if structlog.is_configured() and not force:
        return
    structlog.configure(
        processors=_stdlib_processors(),
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


route_structlog_to_stdlib()


def get_logger(name: str = LOGGER_NAME) -> Any:
    return structlog.get_logger(name)


class _ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = _dt.datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        return f"{ts} [{record.levelname.lower():<7}] {record.getMessage()}"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "timestamp": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "egg_event", record.getMessage()),
            **getattr(record, "egg_fields", {}),
        }
        return json.dumps(doc, default=str)


_CLI_HANDLER = "egg-cli"


def configure_logging(*, json_logs: bool = False, level: str = "info", file: IO[str] | None = None) -> None:
    """The command line's logging: one handler on the `egg` logger, writing to stderr."""
    route_structlog_to_stdlib(force=True)
    logger = logging.getLogger(LOGGER_NAME)
    for h in [h for h in logger.handlers if h.get_name() == _CLI_HANDLER]:
        logger.removeHandler(h)
    handler = logging.StreamHandler(file or sys.stderr)
    handler.set_name(_CLI_HANDLER)
    handler.setFormatter(_JsonFormatter() if json_logs else _ConsoleFormatter())
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper()))
    logger.propagate = False  # the application's root handlers would print each line twice

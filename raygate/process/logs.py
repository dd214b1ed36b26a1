"""Logging set-up: JSON lines in the cluster, readable text on a terminal.

``configure(level, format)`` installs one stderr handler on the root logger. ``auto``
picks text when stderr is a terminal and JSON lines otherwise (a pod's log, read by a log
collector). A JSON line carries ``time`` (RFC 3339, UTC, milliseconds), ``level``,
``logger`` and ``message``, plus ``exception`` when there is one, and — when the line is
about them — ``namespace``, ``pod``, ``raycluster`` and ``verb`` as fields of their own,
so that a log query selects by them rather than by matching the message. The call sites
pass them with ``extra=about(...)``; the text format shows the message alone (which names
them too), so a terminal reads as before.

``debug`` applies to raygate's own loggers only: the Kubernetes client and urllib3 log
request and response bodies (whole Pods) and headers at debug, which raygate never
writes out. raygate's own lines name a pod by ``namespace/name``, never by its object.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

import msgspec

__all__ = ["FIELDS", "FORMATS", "LEVELS", "JsonFormatter", "about", "configure"]

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWN_LOGGERS = ("raygate",)
"""The loggers that follow ``level`` below info; every other stays at info or above."""


FIELDS = ("namespace", "pod", "raycluster", "verb")
"""What a line may be about, each a JSON field of its own (``about``)."""


def about(*, namespace: str = "", pod: str = "", raycluster: str = "",
          verb: str = "") -> dict[str, str]:
    """``extra=`` for a log call: what the line is about. ``pod`` and ``raycluster`` are
    names within ``namespace``; ``verb`` a scheduler verb (``scheduler/filter``,
    ``volcano/predicate``, ...). Empty values are left out."""
    given = {"namespace": namespace, "pod": pod, "raycluster": raycluster, "verb": verb}
    return {key: value for key, value in given.items() if value}


class _Line(msgspec.Struct, omit_defaults=True):
    time: str
    level: str
    logger: str
    message: str
    namespace: str = ""
    pod: str = ""
    raycluster: str = ""
    verb: str = ""
    exception: str = ""
    stack: str = ""


_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in a traceback are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        line = _Line(
            time=when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
            level=record.levelname.lower(),
            logger=record.name,
            message=record.getMessage(),
        )
        for key in FIELDS:
            value = record.__dict__.get(key)
            if value:
                setattr(line, key, str(value))
        if record.exc_info:
            line.exception = self.formatException(record.exc_info)
        if record.stack_info:
            line.stack = self.formatStack(record.stack_info)
        return _encode(line).decode()


def configure(level: str = "info", format: str = "auto", stream: TextIO | None = None) -> str:
    """Send every log record to ``stream`` (stderr) as ``format``; returns the format
    chosen (``json`` or ``text``). Replaces any handler already on the root logger."""
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
    if format not in FORMATS:
        raise ValueError(f"log format {format!r}: expected one of {', '.join(FORMATS)}")
    out = sys.stderr if stream is None else stream
    if format == "auto":
        format = "text" if _is_terminal(out) else "json"
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    numeric = logging.getLevelName(level.upper())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(numeric, logging.INFO))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(numeric)
    return format


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real file
        return False

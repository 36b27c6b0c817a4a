"""surge's loggers: every message they emit goes through the redaction every
report does (surge.trace.redact.safe_text: a URL's userinfo, the values of
secret query parameters), whatever a call site formats into it - a URL, an
error's detail, a database URL - and so is the traceback a record carries
(``exc_info``: an exception's message quotes URLs too) and its ``stack_info``.
A filter on the logger itself, so that it holds for any handler an application
attaches; a record is redacted only when it is made (past the level check), and
redact.py is imported then."""

from __future__ import annotations

import logging


class _Redacting(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from surge.trace.redact import safe_text

        message = record.getMessage()
        written = safe_text(message)
        if written != message:
            record.msg, record.args = written, None
        if record.exc_info and not record.exc_text:
            # Formatter.format uses exc_text when it is set: the traceback is
            # rendered once, here, and every handler writes the redacted one.
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = safe_text(record.exc_text)
        if record.stack_info:
            record.stack_info = safe_text(record.stack_info)
        return True


_FORMATTER = logging.Formatter()


_FILTER = _Redacting()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, its messages redacted (see the module)."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log

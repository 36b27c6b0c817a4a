"""surge's loggers: every message they emit goes through the redaction every
report does (surge.trace.redact.safe_text: a URL's userinfo, the values of
secret query parameters), whatever a call site formats into it - a URL, an
error's detail, a database URL.  A filter on the logger itself, so that it
holds for any handler an application attaches; the message is redacted only
when a record is made (past the level check), and redact.py is imported then."""

from __future__ import annotations

import logging


class _Redacting(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from surge.trace.redact import safe_text

        message = record.getMessage()
        written = safe_text(message)
        if written != message:
            record.msg, record.args = written, None
        return True


_FILTER = _Redacting()


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, its messages redacted (see the module)."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log

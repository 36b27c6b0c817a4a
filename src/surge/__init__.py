"""surge: bulk network I/O for Python that is fast by default and shows where the time goes."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

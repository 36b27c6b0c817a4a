"""surge's optional parts: which extra installs a module, and how to say so.

One place for the hint, so that every command that misses an optional
dependency names the extra the same way - and a way that works: surge is
installed from a checkout, not from the package index.
"""

from __future__ import annotations

#: A module an optional part of surge needs -> the extra that installs it.
EXTRAS = {
    "botocore": "s3",
    "dask": "cluster",
    "distributed": "cluster",
    "pymysql": "db",
    "psycopg": "db",
    "aiomysql": "db",
    "sqlalchemy": "dev",
    "django": "dev",
    "requests": "bench",
    "aiohttp": "bench",
    "httpx": "bench",
    "pycurl": "bench",
    "grequests": "bench",
    "gevent": "bench",
    "pyreqwest": "bench",
    "psutil": "bench",
    "matplotlib": "bench",
    "opentelemetry": "watch",
}


def install_hint(extra: str) -> str:
    """How to install ``extra``: ``install surge with its [s3] extra (...)``."""
    return f"install surge with its [{extra}] extra (pip install '.[{extra}]' in a checkout)"

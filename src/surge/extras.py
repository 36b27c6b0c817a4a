"""surge's optional parts: which extra installs a module, and how to say so.

One place for the hint, so that every command and every API call that misses an
optional dependency names the extra the same way - and a way that works: surge
is installed from a checkout, not from the package index.  The CLI turns a
missing module into one line (:func:`surge.cli.missing_extra`); the API raises
:class:`MissingExtra`, a ``ModuleNotFoundError`` whose message names the extra,
from :func:`optional_import` or :func:`missing`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: A module an optional part of surge needs -> the extra that installs it.
EXTRAS = {
    "botocore": "s3",
    "dask": "cluster",
    "distributed": "cluster",
    "protego": "crawl",
    "pymysql": "db",
    "psycopg": "db",
    "aiomysql": "db",
    "sqlalchemy": "sqlalchemy",
    "django": "django",
    "requests": "requests",
    "aiohttp": "bench",
    "httpx": "httpx",
    "pycurl": "bench",
    "grequests": "bench",
    "gevent": "bench",
    "pyreqwest": "bench",
    "psutil": "bench",
    "matplotlib": "bench",
    "opentelemetry": "watch",
}

#: Optional modules no extra installs (they need system packages to build), and
#: how to install each.
NOT_AN_EXTRA = {
    "MySQLdb": "pip install mysqlclient (it builds against MariaDB's client library: "
    "on Debian, apt-get install libmariadb-dev pkg-config gcc python3-dev first)",
}


class MissingExtra(ModuleNotFoundError):
    """An optional dependency of the part of surge being used is not installed;
    the message says which extra (or package) installs it."""


def install_hint(extra: str) -> str:
    """How to install ``extra``: ``install surge with its [s3] extra (...)``."""
    return f"install surge with its [{extra}] extra (pip install '.[{extra}]' in a checkout)"


def how_to_install(module: str) -> str | None:
    """How to install the optional module ``module`` (any submodule of it), or
    None if it is not one of surge's optional dependencies."""
    top = module.partition(".")[0]
    if top in NOT_AN_EXTRA:
        return NOT_AN_EXTRA[top]
    extra = EXTRAS.get(top)
    return install_hint(extra) if extra is not None else None


def missing(error: ModuleNotFoundError, needed_by: str) -> ModuleNotFoundError:
    """``error`` as a :class:`MissingExtra` naming the extra, when the module it
    could not find is an optional dependency; else ``error`` itself (a bug, whose
    traceback is wanted).  ``needed_by``: what the user called, for the message."""
    if isinstance(error, MissingExtra):
        return error
    top = (error.name or "").partition(".")[0]
    how = how_to_install(top)
    if how is None:
        return error
    return MissingExtra(f"{needed_by} needs {top}, which is not installed: {how}", name=top)


def optional_import(module: str, needed_by: str) -> ModuleType:
    """``importlib.import_module(module)``, raising :class:`MissingExtra` (which
    names the extra) when the optional dependency is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise missing(error, needed_by) from None

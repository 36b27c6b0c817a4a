"""Which keys a copy takes, and where each one lands: the AWS CLI's filters and
a key-to-path mapping that cannot leave the destination.

Pure functions of strings, no I/O, every rule a plain unit test - but for
:func:`walk_files`, the walk of a local tree that uploads and syncs share.

Filters (``--exclude`` / ``--include``) are the AWS CLI's
(awscli/customizations/s3/filters.py): every key is taken unless a filter says
otherwise; the filters are tried in the order given and the *last* one that
matches decides. A pattern is a ``fnmatch`` glob (``*`` crosses ``/``, ``?`` one
character, ``[seq]``), case-sensitive, matched against the whole key with the
source's "directory" (``bucket/prefix/``) put in front of the pattern - so a
pattern is relative to the prefix: ``--exclude '*' --include '*.txt'`` takes
the ``.txt`` keys at any depth.

Paths: a key's part after the prefix is split on ``/`` and joined under the
destination. S3 keys are any UTF-8 text, so a key can say ``../../etc/passwd``
or ``/etc/passwd``; such a key is refused (the AWS CLI skips it with a warning)
rather than written outside the destination. Empty and ``.`` segments
(``a//b``, ``a/./b``) collapse, as ``os.path.join`` and the AWS CLI make them.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from fnmatch import fnmatchcase
from typing import Literal

FilterRule = tuple[Literal["include", "exclude"], str]


class Filters:
    """The AWS CLI's include/exclude rules for keys under ``bucket/prefix``."""

    def __init__(self, bucket: str, prefix_dir: str, rules: Sequence[FilterRule] = ()) -> None:
        # The AWS CLI joins the source's directory and the pattern and matches
        # "bucket/key" against that: a pattern is relative to the prefix, and
        # glob characters in the prefix itself are glob characters too.
        root = f"{bucket}/{prefix_dir}"
        self.rules = [(kind, root + pattern) for kind, pattern in rules]
        self.bucket = bucket

    @classmethod
    def build(
        cls, bucket: str, prefix_dir: str, include: Iterable[str], exclude: Iterable[str]
    ) -> Filters:
        """Includes and excludes given as two lists (the Python API): the excludes
        first, then the includes, so that an include re-admits what an exclude
        dropped - what ``--exclude X --include Y`` means on the command line."""
        rules: list[FilterRule] = [("exclude", p) for p in exclude]
        rules += [("include", p) for p in include]
        return cls(bucket, prefix_dir, rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def takes(self, key: str) -> bool:
        path = f"{self.bucket}/{key}"
        taken = True
        for kind, pattern in self.rules:
            if fnmatchcase(path, pattern):
                taken = kind == "include"
        return taken


def prefix_dir(prefix: str) -> str:
    """The "directory" of a prefix, as the AWS CLI cuts keys for a single
    object: ``a/b/c.txt`` -> ``a/b/``."""
    return prefix[: prefix.rfind("/") + 1]


class UnsafeKey(ValueError):
    """A key that would be written outside the destination, or is no file name."""


def relative_parts(relative_key: str) -> list[str]:
    """The path segments a key (after the prefix) maps to, or :class:`UnsafeKey`."""
    if "\0" in relative_key:
        raise UnsafeKey("the key holds a NUL character, which no file name can")
    if relative_key.startswith("/"):
        raise UnsafeKey("the key is an absolute path")
    parts = [part for part in relative_key.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeKey("the key would be written outside the destination directory")
    if os.sep != "/" or os.altsep:  # pragma: no cover - Windows: \ and : are separators too
        for part in parts:
            if os.sep in part or (os.altsep and os.altsep in part) or ":" in part:
                raise UnsafeKey(f"the key's segment {part!r} is not a file name here")
    if not parts:
        raise UnsafeKey("the key names no file")
    return parts


def local_path(destination: str, relative_key: str) -> str:
    """Where the key lands under the directory ``destination``."""
    return os.path.join(destination, *relative_parts(relative_key))


def stays_inside(destination: str, path: str) -> bool:
    """Whether ``path`` (under ``destination`` by name) is under it on disk too:
    its directory, symbolic links resolved (``realpath`` keeps the part that does
    not exist yet as written), is in ``destination`` resolved.  A link inside the
    destination to a directory outside it would otherwise take a key's file out
    (``sub -> /etc``, key ``sub/passwd``)."""
    root = os.path.realpath(destination)
    real = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def walk_files(
    root: str,
    *,
    follow_links: bool = True,
    skip_links: bool = False,
    errors: list[tuple[str, str]] | None = None,
) -> Iterator[tuple[str, str]]:
    """Every file under ``root``, as (path, relative path with ``/``), sorted by
    relative path, one directory read at a time.

    Symbolic links to files are yielded as files.  Links to directories are
    walked when ``follow_links`` (as the AWS CLI does by default) - but never
    into a directory already on the path from ``root`` (a loop is an error) -
    and skipped otherwise.  ``skip_links``: no link at all, to a file or a
    directory (the AWS CLI's ``--no-follow-symlinks``).  A directory that
    cannot be read, or a loop, is appended to ``errors`` as (path, message)
    and the walk goes on; with ``errors`` None it raises ``OSError``.  Never
    silently: a sync's ``--delete`` must not take an unread directory for an
    empty one."""

    def failed(path: str, message: str) -> None:
        if errors is None:
            raise OSError(f"{path}: {message}")
        errors.append((path, message))

    try:
        top = os.stat(root)
    except OSError as e:
        failed(root, e.strerror or str(e))
        return
    stack: list[tuple[str, str, frozenset[tuple[int, int]]]] = [
        (root, "", frozenset({(top.st_dev, top.st_ino)}))
    ]
    while stack:
        directory, relative, ancestors = stack.pop()
        try:
            with os.scandir(directory) as entries:
                listing = sorted(entries, key=lambda e: e.name)
        except OSError as e:
            failed(directory, f"cannot read the directory: {e.strerror or e}")
            continue
        subdirectories = []
        for entry in listing:
            try:
                if entry.is_symlink():
                    if skip_links:
                        continue
                    if not entry.is_dir():  # to a file, or dangling: opened later
                        yield entry.path, relative + entry.name
                        continue
                    if not follow_links:
                        continue
                elif not entry.is_dir(follow_symlinks=False):
                    yield entry.path, relative + entry.name
                    continue
                info = entry.stat()
            except OSError as e:
                if e.errno == errno.ELOOP:
                    failed(entry.path, f"a symbolic link loop ({e.strerror})")
                else:
                    failed(entry.path, e.strerror or str(e))
                continue
            ident = (info.st_dev, info.st_ino)
            if ident in ancestors:
                failed(entry.path, "a symbolic link loop (a link to a directory above it)")
                continue
            subdirectories.append((entry.path, f"{relative}{entry.name}/", ancestors | {ident}))
        stack.extend(reversed(subdirectories))


#: What a file that is not a regular one is, by its type (the AWS CLI skips
#: the same: "character special device, block special device, FIFO, or socket").
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_regular(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is skipped: "not a regular file (a
    FIFO)"; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in _KINDS:
        if test(mode):
            return f"not a regular file ({kind})"
    return "not a regular file"

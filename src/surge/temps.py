"""surge's temporary files: how one is made, how surge knows its own, and
when one is garbage.

A file written whole (an S3 download, a saved body, a HAR, the trace page:
:func:`surge.sinks.open_replacement`) is written to a hidden file beside its
final name, ``.surge-<8 hex digits>-<name>``, and renamed into place only when
complete.  A run that is killed outright (SIGKILL, a power cut) cannot remove
its temporary files, so two things a name cannot fake tell them apart:

* **The marker**: each carries the extended attribute ``user.surge`` =
  ``temporary``, set on its descriptor as it is created and taken off just
  before the rename (:func:`unmark`).  No download, copy or upload gives a
  file that attribute - an object ``.surge-0123abcd-report.csv`` downloaded,
  or a user's file of that name, has the name and not the marker - so a file
  named like a temporary one is still the user's unless surge marked it.
* **The lock**: the run that made one holds an exclusive ``flock(2)`` on it
  for as long as it has it open, and the kernel lets go of the lock when the
  process ends, however it ends.  A marked file whose lock can be taken has no
  live owner.

So:

* the next S3 download into that directory removes a marked file nobody
  holds (:func:`remove_stale`), as it first meets the directory;
* an upload (``cp -r``, ``sync``) never sends a marked file, alive or dead
  (:func:`is_ours`): a half-written download is no object;
* a sync's ``--delete`` leaves a live one to its owner and removes a dead one
  (:func:`remove_if_stale`);
* a file merely named like one is the user's: downloaded, kept, uploaded.

Two runs writing into one directory never take each other's files (the lock;
PID files would be fooled by a PID used again).  Where the file system has no
``flock`` (some FUSE and NFS mounts) a temporary file is unlocked and never
taken for garbage (the lock cannot be tried); where it has no extended
attributes (vfat, some FUSE and NFS mounts; tmpfs before Linux 6.6) it is
unmarked, so a killed run's are left for the user, as any file of theirs.
Costs per file: a ``flock``, an ``fsetxattr`` and a ``stat`` beside the
``open`` (~3 us), an ``fremovexattr`` before the rename; per directory an S3
download meets, one ``scandir``.
"""

from __future__ import annotations

import errno
import os
import re
import secrets

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks
    fcntl = None  # type: ignore[assignment]

PREFIX = ".surge-"
_NAME = re.compile(r"\.surge-[0-9a-f]{8}-", re.ASCII)
#: The marker: an extended attribute only surge sets, only on its temporary files.
MARKER = "user.surge"
MARKER_VALUE = b"temporary"
#: Name bytes kept of the final name: 255 bytes is the usual limit of a file
#: name, and the temporary one must fit too.
_KEPT = 200

#: What flock(2) says on a file system that has no such locks (some FUSE and
#: NFS mounts): the file is written unlocked.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})
#: What the xattr calls say on a file system without (user) extended attributes.
_NO_XATTRS = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS})


def named_like(name: str) -> bool:
    """Whether a file name (not a path) has the shape of a temporary file's.
    The shape alone proves nothing: see :func:`is_ours`."""
    return name.startswith(PREFIX) and _NAME.match(name) is not None


def create(directory: str, name: str) -> tuple[str, int]:
    """A new temporary file for ``name`` in ``directory``, opened for reading and
    writing, locked and marked: (its path, its descriptor).  The lock is the
    caller's until it closes the descriptor."""
    short = name.encode(errors="surrogateescape")[:_KEPT].decode("utf-8", "ignore")
    for _ in range(8):
        temp = os.path.join(directory, f"{PREFIX}{secrets.token_hex(4)}-{short}")
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        # Another run's clean-up may take the file between the open and the
        # lock: then the name is no longer this file, and another is tried.
        # (Unmarked until locked, it is nobody's garbage meanwhile: harmless.)
        try:
            if _lock(fd) and _same(os.stat(temp), os.fstat(fd)):
                try:
                    _mark(fd)
                except OSError:  # ENOSPC for the attribute's block: no file left
                    os.unlink(temp)
                    raise
                return temp, fd
        except OSError as e:
            if e.errno != errno.ENOENT:
                os.close(fd)
                raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "could not make a temporary file", directory)


def unmark(file: int | str) -> None:
    """Take the marker off (``file``: a descriptor, or a path) before the file
    gets its final name: from then on it is the user's file, whatever its name."""
    if not hasattr(os, "removexattr"):  # pragma: no cover - not Linux
        return
    try:
        if isinstance(file, int):
            os.removexattr(file, MARKER)
        else:
            os.removexattr(file, MARKER, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (*_NO_XATTRS, errno.ENODATA):
            raise


def is_ours(path: str) -> bool:
    """Whether the file at ``path`` is one of surge's temporary files (alive or
    dead): named so, and marked.  Never follows a symbolic link."""
    if not named_like(os.path.basename(path)) or not hasattr(os, "getxattr"):
        return False
    try:
        return os.getxattr(path, MARKER, follow_symlinks=False) == MARKER_VALUE
    except OSError:
        return False


def remove_if_stale(path: str) -> bool:
    """Remove the temporary file at ``path`` if it is surge's and no live run
    holds it; whether it was removed.  Never follows a symbolic link; any
    error: left alone."""
    if not is_ours(path) or fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its run is alive (or the file system says no)
        if not _same(os.lstat(path), os.fstat(fd)) or not _marked(fd):
            return False  # replaced since it was looked at
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale(directory: str) -> int:
    """Remove every temporary file of surge's in ``directory`` whose run is
    gone; how many."""
    removed = 0
    try:
        with os.scandir(directory) as entries:
            named = [e.path for e in entries if named_like(e.name)]
    except OSError:
        return 0
    for path in named:
        removed += remove_if_stale(path)
    return removed


def _lock(fd: int) -> bool:
    """Lock the new file; False if someone else holds it already."""
    if fcntl is None:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _NO_LOCKS:
            return True  # a file system without flock: unlocked, but written
        if e.errno == errno.EWOULDBLOCK:
            return False
        raise
    return True


def _mark(fd: int) -> None:
    if not hasattr(os, "setxattr"):  # pragma: no cover - not Linux
        return
    try:
        os.setxattr(fd, MARKER, MARKER_VALUE)
    except OSError as e:
        if e.errno not in _NO_XATTRS:
            raise


def _marked(fd: int) -> bool:
    try:
        return os.getxattr(fd, MARKER) == MARKER_VALUE
    except OSError:
        return False


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

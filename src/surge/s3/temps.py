"""A download's temporary files: who owns one, and when it is garbage.

Each object is written to a hidden file beside its final name,
``.surge-<8 hex digits>-<name>``, and renamed into place only when complete
and verified (:mod:`surge.s3.transfer`).  A run that is killed outright
(SIGKILL, a power cut) cannot remove its temporary files, so ownership is
kept where the kernel keeps it for us: the run that made a temporary file
holds an exclusive ``flock(2)`` on it for as long as it has it open, and the
kernel lets go of the lock when the process ends, however it ends.  A
temporary file whose lock can be taken therefore has no live owner:

* the next run into that directory removes it (:func:`remove_stale`), as it
  first meets the directory;
* an upload (``cp -r``, ``sync``) never sends a file named so, alive or dead
  (:func:`is_temporary`): a half-written download is no object;
* a sync's ``--delete`` leaves a live one to its owner and removes a dead one
  (:func:`remove_if_stale`).

The name is recognised by its shape; the lock, not the name, decides that a
file is garbage, so two runs writing into one directory never take each
other's files (PID files would be fooled by a PID used again).  On a file
system without ``flock`` (some FUSE and NFS mounts) a download goes on with
its temporary files unlocked, and nothing there is ever taken for garbage:
the lock cannot be tried.  Costs per
object: a ``flock`` and a ``stat`` beside the ``open`` (~2 us); per
directory, one ``scandir`` the first time a run meets it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets

PREFIX = ".surge-"
_NAME = re.compile(r"\.surge-[0-9a-f]{8}-", re.ASCII)
#: Name bytes kept of the final name: 255 bytes is the usual limit of a file
#: name, and the temporary one must fit too.
_KEPT = 200


#: What flock(2) says on a file system that has no such locks (some FUSE and
#: NFS mounts): the download goes on, its temporary file unlocked.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


def is_temporary(name: str) -> bool:
    """Whether a file name (not a path) is one of a download's temporary files."""
    return name.startswith(PREFIX) and _NAME.match(name) is not None


def create(directory: str, name: str) -> tuple[str, int]:
    """A new temporary file for ``name`` in ``directory``, opened for reading and
    writing and locked: (its path, its descriptor).  The lock is the caller's
    until it closes the descriptor."""
    short = name.encode()[:_KEPT].decode("utf-8", "ignore")
    for _ in range(8):
        temp = os.path.join(directory, f"{PREFIX}{secrets.token_hex(4)}-{short}")
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Another run's clean-up may have taken the file between the open
            # and the lock (it found it unlocked): then the name is no longer
            # this file, and another name is tried.
            if _same(os.stat(temp), os.fstat(fd)):
                return temp, fd
        except OSError as e:
            if e.errno in _NO_LOCKS:
                return temp, fd  # a file system without flock: unlocked, but written
            if e.errno not in (errno.EWOULDBLOCK, errno.ENOENT):
                os.close(fd)
                raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "could not make a temporary file", directory)


def remove_if_stale(path: str) -> bool:
    """Remove the temporary file at ``path`` if no live run holds it; whether
    it was removed.  Never follows a symbolic link; any error: left alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its run is alive (or the file system says no)
        if not _same(os.lstat(path), os.fstat(fd)):
            return False  # replaced since it was opened
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale(directory: str) -> int:
    """Remove every temporary file in ``directory`` whose run is gone; how many."""
    removed = 0
    try:
        with os.scandir(directory) as entries:
            stale = [e.path for e in entries if is_temporary(e.name)]
    except OSError:
        return 0
    for path in stale:
        removed += remove_if_stale(path)
    return removed


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

"""Every file surge writes, and the inputs it reads whole: one contract, one place.

``surge fetch`` writes records (``-o`` or stdout), a WARC, a HAR, a trace page
and saved bodies; ``surge trace`` writes stdout; ``surge s3`` writes listings,
its lines and downloaded objects (stdout too: ``cp s3://b/k -``).  Each goes
through a :class:`Sink`, so one set of rules holds for all of them:

* **A write is whole, or it is an error.**  A short write is continued (a
  signal, a full pipe, Linux's 2 GiB cap per call), a non-blocking descriptor
  that says EAGAIN is waited for; any other failure - ENOSPC, EFBIG (a size
  limit: Python ignores SIGXFSZ, so the write fails instead of the process
  dying), EIO, EPIPE, EBADF - is a :class:`~surge.errors.SinkError` (a
  ``UsageError``: one line and exit status 2 on the command line) naming the
  file and the error, its ``errno`` kept.  The sink then refuses further
  writes, so nothing lands after a gap.  Where a run writes many files (an S3
  download) the errors no other file would escape (:data:`ENDS_RUN`: a full
  disk, a size limit, EIO, a reader gone) end the run - one line - rather
  than fail each file left.
* **What was written before stays.**  A regular file the sink owns is cut back
  to where the failed write began, or to the end of the last whole line it got
  out, so it still ends at a whole record (the records, a WARC's exchange);
  stdout redirected to a file is cut back the same way, only if the file still
  ends with what the write got out (``>>`` may share it with other writers).
* **One run owns each output** (records, WARC): an exclusive ``flock`` taken
  before anything is truncated; a second run is refused with one line naming
  the holder's pid (from ``/proc/locks`` where there is one).  The same file
  given for two outputs of one run is refused the same way.
* **A file written whole is replaced whole** (a saved body, a HAR, the trace
  page, an S3 download: :func:`open_replacement`): written to a hidden
  temporary file beside it (:mod:`surge.temps`: locked by its run and marked
  as surge's, so that a file merely *named* like one is never taken for one)
  and renamed over it when complete, so a failure leaves the old file (or
  none) and no half file.  A symlink's target is replaced, not the link (or,
  for S3's keys, the link); a device or a FIFO (``/dev/null``, ``/dev/full``,
  a pipe) is written in place - never replaced by a file, which as root would
  replace ``/dev/null`` itself.
* **No output is an input** (:func:`protect_input`): a file the run reads is
  refused by every sink, by what it is (device and inode), not by its name -
  a hard link, a symlink, a rotated WARC's next name - and so is the file on
  standard input (:func:`protect_stdin`: by the inode of descriptor 0, so
  ``-o st.txt < st.txt`` and ``-o /dev/stdin`` alike).
* **No two sinks are one file** (:func:`claim`): a locked output (records, a
  WARC) claims its file as it opens it, a file written whole that must stay
  the run's own (a HAR, the trace page) is claimed by its caller; any later
  sink - a saved body - that would be a claimed file, by device and inode or
  by the path a rename would land on (a hard link, a symlink), is refused
  (a ``SinkError``) before it writes a byte, and the claimed file is left as
  it is.
* **An output deleted or replaced during the run stops it** (one line), rather
  than go on writing into a file nobody can reach.
* **A closed stdin or stdout is a usage error; a closed stderr is none.**
  :func:`guard_standard_streams` (run first by every entry point of the
  command line) puts ``/dev/null`` on a closed 0, 1 or 2, so that no file the
  run opens takes that number and receives what was meant for the stream,
  gives ``sys.stdin``/``sys.stdout``/``sys.stderr`` a stream where Python left
  None, and remembers which were closed.  ``-`` is stdout (``names_stdout``)
  or stdin (``names_stdin``), as is any other name of the same stream.
* **An input read whole is capped** (:func:`read_capped`: ``-d @FILE``), never
  slurped: ``/dev/zero`` is an error after ``cap`` bytes, not after the memory.

Costs: a ``stat`` of the path per write of a regular output (to notice it
deleted), about a microsecond against the write's own system call; writers
batch their writes (records every 0.5 s, WARC exchanges by 256 KiB).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Final

from surge.errors import LocalResourceError, SinkError, UsageError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "ENDS_RUN",
    "NotRegular",
    "Sink",
    "guard_standard_streams",
    "names_stdin",
    "names_stdout",
    "open_output",
    "open_replacement",
    "claim",
    "protect_input",
    "protect_stdin",
    "read_capped",
    "read_lines",
    "read_up_to",
    "reason",
    "stdin_closed",
    "stdout_sink",
    "write_error",
]

#: The most one write system call is asked for (Linux writes at most 0x7ffff000
#: bytes a call; the loop continues a short write either way).
_WRITE_MAX: Final = 1 << 30
#: errno values that mean this process is out of descriptors, not that the file is
#: bad: opening one is a LocalResourceError, which the engine waits out.
LOCAL_SHORTAGE: Final = frozenset({errno.EMFILE, errno.ENFILE})
#: errno values of a failed write that no other file of the run would escape:
#: the disk is full (or the quota spent), a size limit, the device failing, a
#: read-only file system, the reader gone, the descriptor bad.  Where a run
#: writes many files (an S3 download) one of these ends it - one line, exit 2 -
#: rather than fail every file left one by one.
ENDS_RUN: Final = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EFBIG,
        errno.EIO,
        errno.EROFS,
        errno.EPIPE,
        errno.EBADF,
    }
)
#: Standard descriptors (0, 1, 2) that were closed when the command started.
_closed_at_start: set[int] = set()
#: The run's input files, by (st_dev, st_ino) -> the name given: no sink opens one.
_inputs: dict[tuple[int, int], str] = {}
#: The run's claimed outputs (:func:`claim`): by (st_dev, st_ino), and by the
#: real path a replacement would be renamed to -> the name given.
_claimed: dict[tuple[int, int], str] = {}
_claimed_paths: dict[str, str] = {}


def reason(exc: OSError) -> str:
    """``[Errno 28] No space left on device``: without str(exc)'s repeated file name."""
    if exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"
    return str(exc)


def write_error(name: str, exc: OSError, doing: str = "write") -> SinkError:
    """The :class:`SinkError` of a failed write (or open, or read) of ``name``:
    one line naming it and the error, the errno kept."""
    return SinkError(f"{name}: cannot {doing}: {reason(exc)}", errno=exc.errno)


class Sink:
    """One output: a file, or stdout.  Make one with :func:`open_output`,
    :func:`open_replacement` or :func:`stdout_sink`.

    ``write`` takes bytes and writes all of them or raises ``SinkError``;
    ``close`` ends it (a replacement is renamed into place only by ``commit``;
    ``discard`` removes it).  Not thread-safe: each writer serialises its own
    writes (they do already, to keep records whole)."""

    __slots__ = (
        "_broken",
        "_broken_errno",
        "_claim",
        "_closed",
        "_identity",
        "_owned",
        "_rollback",
        "_stream",
        "_temp",
        "created",
        "fd",
        "name",
        "path",
        "position",
        "regular",
    )

    def __init__(
        self,
        fd: int,
        name: str,
        *,
        path: str | None,
        regular: bool,
        owned: bool,
        rollback: str | None,
        position: int = 0,
        temp: str | None = None,
        identity: tuple[int, int] | None = None,
    ) -> None:
        self.fd = fd
        #: The file as the user named it ("stdout" for stdout).
        self.name = name
        #: Its path (None: stdout); for a replacement, the file it will replace.
        self.path = path
        #: A regular file: locked, cut back after a failed write, watched.
        self.regular = regular
        #: Bytes written so far (a regular file: the offset the next write goes to).
        self.position = position
        self._owned = owned  # closed by close() (stdout is not)
        self._rollback = rollback  # None, "write" or "line" (see open_output)
        self._temp = temp
        self._identity = identity  # (st_dev, st_ino) the path must still name
        #: A Python stream written instead of ``fd`` (a sys.stdout replaced by
        #: the program: Jupyter's, a test's).
        self._stream: IO[str] | None = None
        self._broken: str | None = None
        self._broken_errno: int | None = None
        self._closed = False
        #: The open created the file: :meth:`abandon` removes it again.
        self.created = False
        #: What :func:`claim` took for it, given back by :meth:`close`.
        self._claim: Callable[[], None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``, or raise :class:`SinkError` (after cutting a
        regular file back to where this write began)."""
        if self._broken is not None:
            raise self._broken_error()
        if self._closed:
            raise ValueError(f"{self.name}: write to a closed sink")
        whole = view = memoryview(data).cast("B")
        if not view:
            return
        if self._identity is not None:
            self._check_still_there()
        start = self.position
        fd = self.fd
        if self._stream is not None:
            self._write_stream(view)
            return
        try:
            while view:
                try:
                    written = os.write(fd, view[:_WRITE_MAX])
                except BlockingIOError:
                    # a descriptor someone set non-blocking (a shared terminal or
                    # pipe): wait until it takes more, as a blocking write would
                    _wait_for(fd, select.POLLOUT)
                    continue
                if written <= 0:  # pragma: no cover - POSIX says never for a non-empty write
                    raise OSError(errno.EIO, "the write wrote nothing")
                view = view[written:]
                self.position += written
        except OSError as exc:
            self._fail(
                f"{self.name}: cannot write: {reason(exc)}", self._keep(whole, start), exc.errno
            )
        except BaseException:
            # interrupted mid-write (KeyboardInterrupt from a signal handler): the
            # file must not keep half of what this write was given
            self._fail(
                f"{self.name}: a write was interrupted", self._keep(whole, start), raise_it=False
            )
            raise

    def _keep(self, data: memoryview, start: int) -> int:
        """Where a failed write is cut back to: its start, or ("line") the end
        of the last whole line it got out."""
        if self._rollback != "line":
            return start
        return start + bytes(data[: self.position - start]).rfind(b"\n") + 1

    def write_at(self, chunks: Sequence[bytes | memoryview], offset: int) -> None:
        """Write ``chunks`` at ``offset`` of a regular file, whole (``pwritev``:
        the file's offset does not move, so threads may write parts of one file
        at once - ranged downloads), or raise :class:`SinkError` naming it.
        Nothing is cut back: a part that failed is written again or the file
        is discarded."""
        if self._broken is not None:
            raise self._broken_error()
        pending = [memoryview(chunk).cast("B") for chunk in chunks if len(chunk)]
        try:
            while pending:
                written = os.pwritev(self.fd, pending, offset)
                if written <= 0:  # pragma: no cover - POSIX says never for a non-empty write
                    raise OSError(errno.EIO, "the write wrote nothing")
                offset += written
                while pending and written >= len(pending[0]):
                    written -= len(pending.pop(0))
                if written:
                    pending[0] = pending[0][written:]
        except OSError as exc:
            self._broken = f"{self.name}: cannot write: {reason(exc)}"
            self._broken_errno = exc.errno
            raise self._broken_error() from None

    def _broken_error(self) -> SinkError:
        assert self._broken is not None
        return SinkError(self._broken, errno=self._broken_errno)

    def _write_stream(self, view: memoryview) -> None:
        stream = self._stream
        assert stream is not None
        try:
            buffer = getattr(stream, "buffer", None)
            if buffer is not None:
                buffer.write(view)
                buffer.flush()
            else:
                stream.write(bytes(view).decode("utf-8", "surrogateescape"))
                stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            if isinstance(exc, OSError):
                self._fail(f"{self.name}: cannot write: {reason(exc)}", self.position, exc.errno)
            self._fail(f"{self.name}: cannot write: {exc}", self.position, errno.EBADF)
        self.position += len(view)

    def _fail(
        self, message: str, keep: int, number: int | None = None, *, raise_it: bool = True
    ) -> None:
        self._broken = message
        self._broken_errno = number
        if self._rollback is not None and self.position != keep:
            with contextlib.suppress(OSError):
                if self.regular:
                    os.ftruncate(self.fd, keep)
                    os.lseek(self.fd, keep, os.SEEK_SET)
                    self.position = keep
                else:
                    self._cut_shared(keep)
        if raise_it:
            raise SinkError(message, errno=number) from None

    def _cut_shared(self, keep: int) -> None:
        """stdout redirected to a file (``> out.jsonl``): cut what this write
        got out past ``keep`` - only if the file still ends with it, so that
        nothing another writer of the file added is cut (``>>`` may share it)."""
        end = os.lseek(self.fd, 0, os.SEEK_CUR)
        if os.fstat(self.fd).st_size != end:
            return
        cut = end - (self.position - keep)
        if cut >= 0:
            os.ftruncate(self.fd, cut)
            self.position = keep

    def _check_still_there(self) -> None:
        assert self.path is not None and self._identity is not None
        try:
            now = os.stat(self.path)
            same = (now.st_dev, now.st_ino) == self._identity
        except OSError:
            same = False
        if not same:
            self._broken = (
                f"{self.name}: deleted or replaced during the run (what was written to it went"
                " with it)"
            )
            raise SinkError(self._broken, errno=errno.ENOENT)

    def truncate(self, size: int) -> None:
        """Cut a regular file to ``size`` bytes and write on from there."""
        if not self.regular:
            raise ValueError(f"{self.name}: only a regular file can be cut")
        try:
            os.ftruncate(self.fd, size)
            self.position = os.lseek(self.fd, size, os.SEEK_SET)
        except OSError as exc:
            raise write_error(self.name, exc) from None

    def seek_end(self) -> int:
        """Write on from the file's end (after it was cut through another
        descriptor); the new position."""
        try:
            self.position = os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as exc:
            raise write_error(self.name, exc) from None
        return self.position

    def read_lines(self, limit: int) -> Iterator[tuple[bytes, bool, int]]:
        """The file's lines from its start, without moving the write offset:
        (line, whole, offset), ``whole`` False for a last line lacking its
        newline.  A line longer than ``limit`` bytes (its newline not counted)
        comes cut, but still longer than ``limit``: never held whole."""
        if not self.regular:
            raise ValueError(f"{self.name}: only a regular file is read back")
        return read_lines(self.fd, limit, self.name)

    def close(self) -> None:
        """Close the file (never stdout's descriptor); again: nothing."""
        if self._closed:
            return
        self._closed = True
        if self._claim is not None:
            self._claim()
            self._claim = None
        if self._owned:
            try:
                os.close(self.fd)
            except OSError as exc:  # NFS reports a failed write here
                if self._broken is None:
                    self._broken = f"{self.name}: cannot write: {reason(exc)}"
                    self._broken_errno = exc.errno
                    raise self._broken_error() from None

    def commit(self) -> None:
        """Close; a replacement is then renamed over the file it replaces (its
        temporary file's marker taken off first: from then on it is a file of
        the user's, whatever its name)."""
        if self._temp is not None:
            try:
                from surge.temps import unmark  # loaded with the replacement that made _temp

                unmark(self._temp if self._closed else self.fd)
            except OSError as exc:
                self.discard()
                raise write_error(self.name, exc) from None
        self.close()
        temp, self._temp = self._temp, None
        if temp is None:
            return
        assert self.path is not None
        try:
            os.replace(temp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise write_error(self.name, exc) from None

    def discard(self) -> None:
        """Close without complaint; a replacement's temporary file is removed,
        so the file it would have replaced stays as it was."""
        with contextlib.suppress(SinkError):
            self.close()
        temp, self._temp = self._temp, None
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def abandon(self) -> None:
        """Close, leaving things as they were before the sink was opened: a file
        its open created (and nothing was written to) is removed again."""
        self.discard()
        if self.created and self.path is not None:
            with contextlib.suppress(OSError):
                if (now := os.stat(self.path)).st_size == 0 and (
                    now.st_dev,
                    now.st_ino,
                ) == self._identity:
                    os.unlink(self.path)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Sink {self.name!r} fd={self.fd}>"


def open_output(
    path: str | os.PathLike[str] | None,
    *,
    append: bool = False,
    lock: bool = True,
    rollback: str | None = "write",
    wait_for_reader: bool = True,
) -> Sink:
    """The sink of an output file (``None`` or ``"-"``: :func:`stdout_sink`).

    A regular file is locked (``lock``: ``flock``, exclusive; a file another
    run holds is a ``SinkError`` naming its pid), then emptied - or, with
    ``append``, written on from its end.  Nothing is truncated before the lock
    is held.  A device or FIFO is written as it is (a FIFO's open waits for a
    reader, as the shell's ``>`` does).  A failed write cuts a regular file back
    (``rollback``): to where the write began ("write": a WARC's exchanges), to
    the end of the last whole line it got out ("line": records), or not (None).
    ``wait_for_reader=False``: a FIFO without a reader is a ``SinkError`` with
    errno ENXIO at once (an event loop retries it rather than block).  A file
    that is one of the run's inputs (:func:`protect_input`) is refused.
    """
    if path is None or os.fspath(path) == "-":
        return stdout_sink()
    name = os.fspath(path)
    if 1 in _closed_at_start and name in _STD_NAMES[1]:
        raise SinkError(f"{name}: cannot write: stdout is closed", errno=errno.EBADF)
    # Read access for a regular file: --resume reads what it appends to through
    # the descriptor it locked.  A FIFO opened for reading and writing would be
    # its own reader, so anything else is opened for writing only.
    try:
        existing: os.stat_result | None = os.stat(name)
    except OSError:
        existing = None  # missing (created below), or the open says why not
    mode = os.O_RDWR if existing is None or stat.S_ISREG(existing.st_mode) else os.O_WRONLY
    if existing is not None and not wait_for_reader and stat.S_ISFIFO(existing.st_mode):
        mode |= os.O_NONBLOCK  # ENXIO if nobody reads; cleared once open
    created = False
    if existing is None:
        try:  # exclusively, to know whether this open made the file
            fd = _open(name, mode | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
            created = True
        except SinkError:
            fd = _open(name, mode | os.O_CREAT | os.O_CLOEXEC)
    else:
        fd = _open(name, mode | os.O_CREAT | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):  # pragma: no cover - O_WRONLY fails with EISDIR first
                raise write_error(name, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
            if mode & os.O_NONBLOCK:
                os.set_blocking(fd, True)
            return Sink(fd, name, path=name, regular=False, owned=True, rollback=None)
        _refuse_input(name, info)
        if lock:
            _lock(fd, name, info)  # two locked outputs on one file: refused here
        if append:
            position = os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
            position = 0
        sink = Sink(
            fd,
            name,
            path=name,
            regular=True,
            owned=True,
            rollback=rollback,
            position=position,
            identity=(info.st_dev, info.st_ino),
        )
        sink.created = created
        if lock:  # no other sink of the run may be this file (a body's link)
            sink._claim = _claim_file(name, info, os.path.realpath(name))
        return sink
    except OSError as exc:
        os.close(fd)
        raise write_error(name, exc) from None
    except BaseException:
        os.close(fd)
        raise


def open_replacement(
    path: str | os.PathLike[str], *, in_place: bool = True, follow_links: bool = True
) -> Sink:
    """The sink of a file written whole (a saved body, a HAR, the trace page, an
    S3 download): a temporary file beside it (:func:`surge.temps.create`:
    locked and marked as surge's, opened for reading too), renamed over it by
    :meth:`Sink.commit`, removed by :meth:`Sink.discard`.  An existing file's
    permission bits are kept.  A device or FIFO is written in place (renaming
    over ``/dev/full`` would replace the device) - or, with ``in_place=False``,
    refused with :class:`NotRegular`.  A symbolic link's target is replaced;
    with ``follow_links=False`` the link itself is (nothing is written where
    it points).  A file that is one of the run's inputs is refused."""
    name = os.fspath(path)
    try:
        existing: os.stat_result | None = os.stat(name) if follow_links else os.lstat(name)
    except FileNotFoundError:
        existing = None
    except OSError as exc:  # ENOTDIR, ELOOP, EACCES on a directory above it
        raise write_error(name, exc) from None
    if existing is not None and stat.S_ISLNK(existing.st_mode):
        existing = None  # the link is replaced, whatever it points to
    elif existing is not None and not stat.S_ISREG(existing.st_mode):
        if stat.S_ISDIR(existing.st_mode):
            raise write_error(name, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
        if not in_place:
            raise NotRegular(name, existing.st_mode)
        return open_output(name, lock=False, rollback=None)
    elif existing is not None:
        _refuse_input(name, existing)
    # a symlink's target is replaced (follow_links), not the link
    target = os.path.realpath(name) if follow_links else os.path.abspath(name)
    _refuse_claimed(name, existing, target)
    folder, base = os.path.split(target)
    try:
        from surge.temps import create  # a run that replaces no file never loads it

        temp, fd = create(folder, base)
    except OSError as exc:
        if exc.errno in LOCAL_SHORTAGE:
            raise LocalResourceError(f"{name}: cannot open: {reason(exc)}") from None
        raise write_error(name, exc) from None
    if existing is not None:
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    return Sink(fd, name, path=target, regular=True, owned=True, rollback=None, temp=temp)


class NotRegular(SinkError):
    """:func:`open_replacement` with ``in_place=False`` found a device, a FIFO or
    a socket where the file would go: ``mode`` is its ``st_mode``."""

    def __init__(self, name: str, mode: int) -> None:
        super().__init__(f"{name}: not a regular file", errno=errno.EINVAL)
        self.mode = mode


def stdout_sink() -> Sink:
    """The sink of stdout: never closed, locked or cut (it is the caller's).

    Written with ``os.write`` on descriptor 1 when ``sys.stdout`` is that
    descriptor (the command line: no buffer of Python's to flush, or fail to
    flush, at exit); through ``sys.stdout`` when a program replaced it."""
    stream = sys.stdout
    try:
        fd = stream.fileno() if stream is not None else 1
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
        fd = -1
    if fd != 1 and stream is not None:
        sink = Sink(-1, "stdout", path=None, regular=False, owned=False, rollback=None)
        sink._stream = stream
        return sink
    if not _open_for(1, write=True):
        raise SinkError(
            "stdout: cannot write: it is closed (or not open for writing)", errno=errno.EBADF
        )
    try:
        redirected = stat.S_ISREG(os.fstat(1).st_mode)  # > out.jsonl
    except OSError:  # pragma: no cover - checked open just above
        redirected = False
    # Never locked or emptied (the caller's); a file it is redirected to is cut
    # back to its last whole line when a write fails, if it still ends there.
    rollback = "line" if redirected else None
    return Sink(1, "stdout", path=None, regular=False, owned=False, rollback=rollback)


def protect_input(path: str | os.PathLike[str]) -> None:
    """Make ``path`` (an input file of the run) a file no sink of this process
    opens - by what it is, not by its name: a hard link, a symlink, a rotated
    WARC's next name that happens to be it, are all refused (a ``SinkError``:
    "is the input file") before anything is truncated or renamed over it."""
    try:
        info = os.stat(path)
    except OSError:
        return  # not there (or stdin): nothing to protect; the read says why
    if stat.S_ISREG(info.st_mode):
        _inputs[(info.st_dev, info.st_ino)] = os.fspath(path)


def protect_stdin() -> None:
    """Make the regular file open as standard input (descriptor 0: ``< st.txt``)
    a file no sink of this process opens, as :func:`protect_input` does for an
    input named by its path (a pipe or a terminal has nothing to overwrite)."""
    if 0 in _closed_at_start:
        return  # /dev/null stands in for it
    try:
        info = os.fstat(0)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode):
        _inputs.setdefault((info.st_dev, info.st_ino), "stdin")


def claim(path: str | os.PathLike[str]) -> Callable[[], None]:
    """Make ``path`` (an output of the run written whole: a HAR, the trace page)
    a file no other sink of this process opens: the file it is now (a hard
    link to it), and the path it will be renamed to (a symlink to that).  A
    locked :func:`open_output` claims its file itself (until it is closed).
    Returns what gives the claim back (the run's end)."""
    name = os.fspath(path)
    try:
        info: os.stat_result | None = os.stat(name)
    except OSError:
        info = None
    return _claim_file(name, info, os.path.realpath(name))


def refuse_claimed(path: str | os.PathLike[str]) -> None:
    """Refuse (a ``SinkError``) ``path`` if it is a file another output of this
    run claimed (:func:`claim`): for a file written in place (a body continued
    by ``surge fetch -C -``), which :func:`open_replacement` would check."""
    name = os.fspath(path)
    try:
        info: os.stat_result | None = os.stat(name)
    except OSError:
        info = None
    _refuse_claimed(name, info, os.path.realpath(name))


def _claim_file(name: str, info: os.stat_result | None, target: str) -> Callable[[], None]:
    key = (info.st_dev, info.st_ino) if info is not None and stat.S_ISREG(info.st_mode) else None
    if key is not None:
        _claimed[key] = name
    _claimed_paths[target] = name

    def release() -> None:
        if key is not None and _claimed.get(key) == name:
            del _claimed[key]
        if _claimed_paths.get(target) == name:
            del _claimed_paths[target]

    return release


def _refuse_claimed(name: str, info: os.stat_result | None, target: str) -> None:
    given = _claimed_paths.get(target)
    if given is None and info is not None and stat.S_ISREG(info.st_mode):
        given = _claimed.get((info.st_dev, info.st_ino))
    if given is not None:
        raise SinkError(
            f"{name}: is the file of another output of this run ({given}); write elsewhere",
            errno=errno.EINVAL,
        )


def _refuse_input(name: str, info: os.stat_result) -> None:
    given = _inputs.get((info.st_dev, info.st_ino))
    if given is not None:
        raise SinkError(f"{name}: is the input file ({given}); write elsewhere", errno=errno.EINVAL)


def _wait_for(fd: int, event: int) -> None:
    """Until ``fd`` is ready (poll, not select: a descriptor past 1,024 is fine)."""
    poller = select.poll()
    poller.register(fd, event)
    poller.poll()


def _open(name: str, flags: int, *, at: str | None = None) -> int:
    try:
        return os.open(at or name, flags, 0o666)
    except OSError as exc:
        if exc.errno in LOCAL_SHORTAGE:
            raise LocalResourceError(f"{name}: cannot open: {reason(exc)}") from None
        raise write_error(name, exc) from None


def _lock(fd: int, name: str, info: os.stat_result) -> None:
    if fcntl is None:  # pragma: no cover - not POSIX
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = lock_holder(info)
        if pid == os.getpid():
            raise SinkError(f"{name}: given for two outputs of this run") from None
        holder = f" (pid {pid})" if pid is not None else ""
        raise SinkError(
            f"{name}: in use by another run{holder}; wait for it, or write elsewhere"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # a file system without flock (some network mounts): unlocked, as before


def lock_holder(info: os.stat_result) -> int | None:
    """The pid holding a ``flock`` on the file of ``info`` (Linux's /proc/locks),
    or None if it cannot be told (another system, another pid namespace)."""
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            for row in table:
                fields = row.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter has "->"
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:
                    return int(fields[4]) if fields[4].isdigit() else None
    except OSError:
        return None
    return None


def read_lines(fd: int, limit: int, name: str) -> Iterator[tuple[bytes, bool, int]]:
    """The lines of the file open at ``fd``, from its start, read with ``pread``
    (the descriptor's offset does not move): see :meth:`Sink.read_lines`.
    A read error is a ``SinkError`` naming ``name``."""
    offset = 0  # of the next block
    line_start = 0
    pending = bytearray()  # the current line, up to limit + 2 bytes
    try:
        while block := os.pread(fd, 1 << 20, offset):
            at = 0
            while True:
                end = block.find(b"\n", at)
                stop = len(block) if end < 0 else end + 1
                room = limit + 2 - len(pending)
                if room > 0:
                    pending += block[at : min(stop, at + room)]
                if end < 0:
                    break
                yield bytes(pending), True, line_start
                pending.clear()
                at = end + 1
                line_start = offset + at
            offset += len(block)
    except OSError as exc:
        raise write_error(name, exc, "read") from None
    if pending:
        yield bytes(pending), False, line_start


# -- standard streams ------------------------------------------------------------------


def guard_standard_streams() -> None:
    """Put ``/dev/null`` on each of descriptors 0, 1 and 2 that is closed, and
    remember which were: a closed stdin or stdout is then a usage error when
    the run needs it (:func:`stdin_closed`, :func:`stdout_sink`), and no file
    the run opens gets descriptor 1 and the records meant for stdout.  Python
    leaves ``sys.stdin``/``sys.stdout``/``sys.stderr`` None for a descriptor
    closed at its start; each gets a stream on its ``/dev/null`` here, so that
    no code of the run trips on None (``sys.stderr.isatty()``) - a run with
    stderr closed (cron, a daemon) does its work.  Run first by every entry
    point of the command line; again: nothing."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _closed_at_start.add(fd)
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:  # pragma: no cover - no /dev/null: nothing to guard with
                continue
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None and fd in _closed_at_start:
            stream = open(  # noqa: SIM115 - the process's, for its life
                fd,
                "r" if fd == 0 else "w",
                encoding="utf-8",
                errors="backslashreplace" if fd == 2 else "strict",
                closefd=False,
                buffering=1 if fd else -1,
            )
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)


#: Paths that name a standard descriptor of the process itself.
_STD_NAMES: Final = {
    0: ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"),
    1: ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"),
}


def names_stdin(path: str | os.PathLike[str]) -> bool:
    """Whether reading ``path`` reads stdin's stream: ``-``, ``/dev/stdin``,
    ``/dev/fd/0``, or another name of the pipe, FIFO or terminal open as
    descriptor 0 (a regular file opened by name is read on its own)."""
    return _names(0, path)


def names_stdout(path: str | os.PathLike[str]) -> bool:
    """Whether writing ``path`` writes stdout's stream: ``-``, ``/dev/stdout``,
    ``/dev/fd/1``, or another name of the pipe, FIFO, terminal or device open
    as descriptor 1 (a regular file is written on its own)."""
    return _names(1, path)


def _names(fd: int, path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a name of standard descriptor ``fd``'s stream: one of
    its names, or another path to the pipe, FIFO, terminal or device it is (a
    regular file opened by name is read or written on its own)."""
    name = os.fspath(path)
    if name in _STD_NAMES[fd]:
        return True
    if fd in _closed_at_start:
        return False  # /dev/null stands in for it: no other path is it
    try:
        stream = os.fstat(fd)
        return not stat.S_ISREG(stream.st_mode) and os.path.samestat(os.stat(name), stream)
    except OSError:
        return False


def stdin_closed() -> bool:
    """Whether stdin is missing: closed when the command started, or not open
    for reading."""
    return 0 in _closed_at_start or sys.stdin is None or not _open_for(0, write=False)


def _open_for(fd: int, *, write: bool) -> bool:
    if fd in _closed_at_start:
        return False
    if fcntl is None:  # pragma: no cover - not POSIX
        return True
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return mode == os.O_RDWR or mode == (os.O_WRONLY if write else os.O_RDONLY)


# -- inputs read whole -----------------------------------------------------------------


def read_up_to(fd: int, size: int, name: str) -> bytes:
    """``size`` bytes of the file open at ``fd`` from where it stands - fewer
    only at its end (a pipe's short reads are read on); a descriptor someone
    made non-blocking is waited for.  A read error is a :class:`SinkError`
    naming ``name``; stdin closed at the start is one too."""
    if fd == 0 and 0 in _closed_at_start:
        raise SinkError(f"{name}: cannot read: stdin is closed", errno=errno.EBADF)
    parts: list[bytes] = []
    got = 0
    try:
        while got < size:
            try:
                part = os.read(fd, min(size - got, 1 << 20))
            except BlockingIOError:
                _wait_for(fd, select.POLLIN)
                continue
            if not part:
                break
            parts.append(part)
            got += len(part)
    except OSError as exc:
        raise write_error(name, exc, "read") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_capped(name: str, cap: int, what: str) -> bytes:
    """All of a small input (``"-"``: stdin), refusing one past ``cap`` bytes
    after reading at most ``cap + 1`` (``/dev/zero`` included).  ``what`` names
    it in errors (``-d @FILE``): each is a ``UsageError``."""
    if name == "-" or (name in _STD_NAMES[0] and stdin_closed()):
        if stdin_closed():
            raise UsageError(f"{what}: cannot read: stdin is closed")
        fd, owned = 0, False
    else:
        try:
            fd, owned = os.open(name, os.O_RDONLY | os.O_CLOEXEC), True
        except OSError as exc:
            raise UsageError(f"{what}: cannot read: {reason(exc)}") from None
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            try:
                part = os.read(fd, min(1 << 20, cap + 1 - size))
            except BlockingIOError:
                _wait_for(fd, select.POLLIN)
                continue
            if not part:
                return b"".join(parts)
            size += len(part)
            if size > cap:
                raise UsageError(f"{what}: larger than the {cap:,}-byte cap")
            parts.append(part)
    except OSError as exc:
        raise UsageError(f"{what}: cannot read: {reason(exc)}") from None
    finally:
        if owned:
            os.close(fd)

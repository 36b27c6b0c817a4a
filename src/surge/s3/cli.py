"""``surge s3 ls``: the command line over :mod:`surge.s3.api`.

Flags and output follow the AWS CLI (``aws s3 ls``: ``--recursive``,
``--summarize``, ``--endpoint-url``, ``--region``, ``--profile``,
``--no-sign-request``; lines of date, time, size and key, ``PRE`` for common
prefixes) so that scripts and fingers carry over; ``--json`` writes one JSON
object per line instead, as s5cmd does. Data goes to stdout; progress to stderr,
and only on a terminal.

Every line to stdout goes through one sink (:mod:`surge.sinks`), every line to
stderr through :func:`surge.terminal.tell`: a stdout that is full, closed, or
whose reader went away (``| head``) is one line naming stdout and the error
and exit status 2, as for ``surge fetch``; a full or closed stderr is no error
of the run.

Exit status: 0 when the listing completed (1 if a prefix was given and matched
nothing, as aws s3 ls); 2 for a usage error, for a stdout that cannot be
written, and for an error that is the caller's to fix (no such bucket, access
denied, bad credentials) - the message names the bucket; 1 for a listing that
failed otherwise (the server kept failing after the retries); 130 when
interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import aclosing
from datetime import datetime
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from surge.errors import S3Error, SinkError, UsageError
from surge.loops import new_event_loop
from surge.s3 import interrupts

# Loaded by the surge command to run an s3 command (not by a program that
# imports it): a signal while the rest loads is held, and stops the command
# cleanly as it starts (surge.s3.interrupts).
_loading_for = click.get_current_context(silent=True)
if _loading_for is not None and getattr(_loading_for.find_root().command, "owns_process", False):
    interrupts.hold()

from surge.s3.api import (  # noqa: E402
    Entry,
    ListOptions,
    list_buckets,
    list_pages,
    list_uploads,
    list_versions,
)
from surge.s3.interrupts import STOP_SIGNALS, Interrupted, run_cleanly, stopping  # noqa: E402
from surge.s3.listing import CommonPrefix  # noqa: E402
from surge.s3.parse import S3Object, S3Version, Upload  # noqa: E402
from surge.sinks import names_stdout, stdout_sink  # noqa: E402
from surge.terminal import ProgressLine, die, error_line, tell  # noqa: E402

if TYPE_CHECKING:  # paths.py is the transfers' (a listing has no filters)
    from surge.s3.paths import FilterRule

T = TypeVar("T")


def _proxy_tls(command: Callable[..., None]) -> Callable[..., None]:
    """curl's (and surge fetch's) flags for TLS to an https:// proxy."""
    command = click.option(
        "--proxy-insecure", is_flag=True, help="Do not verify an https:// proxy's certificate."
    )(command)
    return click.option(
        "--proxy-cacert",
        type=click.Path(dir_okay=False),
        help="CA certificates (PEM) to trust for an https:// proxy (default: as for S3).",
    )(command)


def _timeouts_and_debug(command: Callable[..., None]) -> Callable[..., None]:
    """The options every s3 command has: the connect and read timeouts (the
    AWS CLI's --cli-connect-timeout and --cli-read-timeout, under those names
    too) and --debug."""
    command = click.option(
        "--debug",
        is_flag=True,
        help="Say on stderr what is done and why (regions followed, checksums not checked).",
    )(command)
    for name, what in (
        (
            "read",
            "Longest the server may stay silent once a request is sent; a request"
            " that times out is retried. 0: no limit.",
        ),
        ("connect", "Longest a connection may take to open. 0: no limit."),
    ):
        command = click.option(
            f"--{name}-timeout",
            f"--cli-{name}-timeout",
            f"{name}_timeout",
            type=click.FloatRange(min=0),
            metavar="SECONDS",
            help=f"{what}  [default: the profile's cli_{name}_timeout, else 60]",
        )(command)
    return command


def _with(options: list[Any], command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with each of ``options`` (click decorators), in their order."""
    for option in reversed(options):
        command = option(command)
    return command


#: Where the requests go, and how: the options of every command (ls, cp, sync,
#: rm, mv, presign, mb, rb), taken by :func:`_where`; the AWS CLI's names.
_WHERE_OPTIONS: list[Any] = [
    click.option("--endpoint-url", metavar="URL", help="An S3-compatible server (path-style)."),
    click.option("--region", help="Default: from the environment or the profile, else us-east-1."),
    click.option("--profile", help="A profile of the AWS config files."),
    click.option("--no-sign-request", is_flag=True, help="Anonymous requests (public buckets)."),
    click.option(
        "-x",
        "--proxy",
        metavar="[SCHEME://][USER:PASSWORD@]HOST[:PORT]",
        help="Go through this proxy (as surge fetch). Default: $https_proxy, $all_proxy.",
    ),
    _proxy_tls,
]
#: The flags of _WHERE_OPTIONS and of _timeouts_and_debug's timeouts, as the
#: command functions get them.
_WHERE_FLAGS = (
    "endpoint_url",
    "region",
    "profile",
    "no_sign_request",
    "proxy",
    "proxy_cacert",
    "proxy_insecure",
    "connect_timeout",
    "read_timeout",
)


def _where(flags: dict[str, Any]) -> dict[str, Any]:
    """The :data:`_WHERE_FLAGS` taken out of a command's ``flags``, as
    :class:`~surge.s3.api.EndpointOptions` keywords (``--proxy-cacert`` is
    ``proxy_cafile``)."""
    where = {name: flags.pop(name) for name in _WHERE_FLAGS}
    where["proxy_cafile"] = where.pop("proxy_cacert")
    return where


class Out:
    """stdout for text: lines encoded as UTF-8 (a local path's undecodable
    bytes as they were) and written whole through the one stdout sink, or a
    :class:`SinkError` naming stdout (a full disk, a reader gone: one line and
    exit 2)."""

    def __init__(self) -> None:
        self.sink = stdout_sink()

    def write(self, text: str) -> None:
        try:
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate no file name holds
            data = text.encode("utf-8", "backslashreplace")
        self.sink.write(data)

    def line(self, text: str) -> None:
        self.write(text + "\n")


def _stdout(command: str) -> Out:
    """stdout, or the usage error of a closed one."""
    try:
        return Out()
    except SinkError as e:
        die(command, str(e))


def _debug(on: bool) -> None:
    """--debug: surge.s3's log on stderr, one line a record."""
    if not on:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("surge s3: debug: %(message)s"))
    logger = logging.getLogger("surge.s3")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


class _Stopping(click.Group):
    """The s3 commands, each stopped by a signal as :mod:`surge.s3.interrupts`
    says from its first line on: one line and 128 + the signal's number (130
    for Ctrl-C, 143 for SIGTERM), never click's "Aborted!" and status 1, nor a
    SIGTERM that kills the process before its cleanup."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with stopping():
                return super().invoke(ctx)
        except Interrupted as e:
            # the subcommand is named once resolved; before, it is the first argument
            sub = ctx.invoked_subcommand or next(iter(getattr(ctx, "_protected_args", [])), None)
            tell(f"{f'surge s3 {sub}' if sub else 'surge s3'}: interrupted")
            sys.exit(e.status)


@click.group("s3", cls=_Stopping)
def s3_group() -> None:
    """S3 (and S3-compatible) storage."""


@s3_group.command("ls")
@click.argument("url", metavar="[s3://BUCKET[/PREFIX]]", required=False)
@click.option("--recursive", "-r", is_flag=True, help="Every object under the prefix.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@lambda command: _with(_WHERE_OPTIONS, command)
@click.option(
    "--parallel",
    default=16,
    show_default=True,
    help="Listing requests in flight (1: sequential, in key order).",
)
@click.option(
    "--page-size",
    type=click.IntRange(1, 1000),
    default=1000,
    show_default=True,
    help="Keys asked for per request (aws s3 ls --page-size).",
)
@click.option("--human-readable", is_flag=True, help="Sizes in Bytes/KiB/MiB/... (aws s3 ls's).")
@click.option(
    "--all-versions",
    is_flag=True,
    help="Every version and delete marker under the prefix, in key order (s5cmd's flag).",
)
@click.option(
    "--incomplete",
    is_flag=True,
    help="The multipart uploads in progress under the prefix (begun, neither completed nor"
    " aborted), in key order: aws s3api list-multipart-uploads.",
)
@click.option("--summarize", is_flag=True, help="Object count and total size at the end.")
@click.option("--no-progress", is_flag=True, help="No progress line, even on a terminal.")
@_timeouts_and_debug
def ls_command(
    url: str | None,
    recursive: bool,
    as_json: bool,
    parallel: int,
    page_size: int,
    human_readable: bool,
    all_versions: bool,
    incomplete: bool,
    summarize: bool,
    no_progress: bool,
    debug: bool,
    **where: Any,
) -> None:
    """List objects under s3://BUCKET[/PREFIX]; with no URL, list the buckets.

    With --recursive the listing runs --parallel requests at once (by prefix,
    and by key range for flat key spaces) and lines come in no particular
    order; pipe through sort for key order, or use --parallel 1.
    """
    try:
        options = ListOptions(
            recursive=recursive,
            parallel=parallel,
            page_size=page_size,
            **_where(where),
            notice=lambda message: tell(f"surge s3 ls: {message}"),
        )
    except UsageError as e:
        _die(str(e))
    _debug(debug)
    if all_versions and incomplete:
        _die("--all-versions and --incomplete: give one of the two")
    for flag, given in (("--all-versions", all_versions), ("--incomplete", incomplete)):
        if url is None and given:
            _die(f"{flag} needs s3://BUCKET[/PREFIX]")
    out = _stdout("surge s3 ls")
    if url is None:
        _list_buckets(options, as_json, out)
        return
    if all_versions or incomplete:
        _list_marked(url, options, as_json, human_readable, incomplete, out)
        return
    prefix = url[5:].partition("/")[2] if url.startswith("s3://") else ""
    # Without --recursive, aws s3 ls shows names relative to the prefix's "directory".
    strip = 0 if recursive else prefix.rfind("/") + 1
    progress = Progress() if sys.stderr.isatty() and not no_progress else None
    writer = JsonWriter(out) if as_json else TextWriter(out, strip, human_readable)
    loop = new_event_loop()
    try:
        with _exit_statuses():
            _run_listing(loop, _run(url, options, writer, progress))
            if progress is not None:
                progress.close()
                progress = None
            if summarize:
                writer.summary()
    finally:
        loop.close()
        if progress is not None:
            progress.close()
    if prefix and writer.objects == writer.prefixes == 0:
        # as aws s3 ls: a prefix that matches nothing is status 1
        sys.exit(1)


def _run_listing(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """A listing run to its end, or stopped by a signal: its tasks cancelled
    and awaited (no "Task was destroyed but it is pending!"), then
    :class:`Interrupted`; a second signal exits at once."""

    def stop_now(signum: int) -> None:
        tell("surge s3 ls: interrupted again: stopping now")
        os._exit(Interrupted(signum).status)

    return run_cleanly(loop, work, signals=STOP_SIGNALS, again=stop_now)


@contextlib.contextmanager
def _exit_statuses() -> Iterator[None]:
    """What ends a listing early, as the exit status the module docstring lists:
    128 + the signal's number when interrupted (130 Ctrl-C, 143 SIGTERM), 2 or
    1 for an error (a stdout that cannot be written - full, closed, its
    reader gone - is a SinkError: 2)."""
    try:
        yield
    except KeyboardInterrupt as e:
        tell("surge s3 ls: interrupted")
        sys.exit(e.status if isinstance(e, Interrupted) else 130)
    except (UsageError, S3Error) as e:
        _fail(e)


#: What is escaped: control characters (C0, DEL and C1) - a key may hold any
#: of them; printed raw, a newline splits one object's line in two and an
#: escape sequence talks to the terminal - and the backslash, the escape
#: character itself: without it ``a\\tb`` (a backslash, a t) and ``a<TAB>b``
#: would print the same line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")
_NAMED = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\\": "\\\\",
}


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    return _NAMED.get(char) or "".join(f"\\{byte:03o}" for byte in char.encode())


def escape_key(text: str) -> str:
    """``text`` (a key, a URL, a path) escaped as ``ls -b`` (GNU ls's escape
    quoting) escapes file names: control characters as ``\\n``, ``\\t``, ...
    and the others as octal bytes (``\\033``), so that a line per object stays
    one line; a backslash as ``\\\\``, so that the line says one key only
    (read back by undoing each escape).  Nothing else changes - a key without
    control characters or backslashes prints exactly as the AWS CLI prints it."""
    return text if _CONTROL.search(text) is None else _CONTROL.sub(_escaped, text)


def _utc_stamp(when: datetime) -> str:
    """A JSON line's timestamp: ISO 8601 in UTC, to the millisecond, with Z."""
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _local_stamp(epoch_second: float) -> str:
    """A text line's timestamp: local time, as aws s3 ls prints it."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_second))


def _list_marked(
    url: str, options: ListOptions, as_json: bool, human: bool, uploads: bool, out: Out
) -> None:
    """Every version under ``url`` (text lines ``date time size key
    version-id``, ``DELETE`` for the size of a delete marker, ``(latest)``
    after the current version), or (``uploads``) every multipart upload in
    progress (``date time key upload-id``, the date its upload began); or
    JSON lines.  A page printed as it comes."""
    found = 0

    async def run() -> None:
        nonlocal found
        if uploads:
            async with aclosing(list_uploads(url, options=options)) as pages:
                async for page in pages:
                    found += len(page)
                    out.write("".join(_upload_line(u, as_json) for u in page))
            return
        async with aclosing(list_versions(url, options=options)) as versions:
            async for listed in versions:
                found += len(listed)
                out.write("".join(_version_line(v, as_json, human) for v in listed))

    loop = new_event_loop()
    try:
        with _exit_statuses():
            _run_listing(loop, run())
    finally:
        loop.close()
    if not found and url[5:].partition("/")[2]:
        sys.exit(1)  # a prefix that matches nothing, as a listing of objects


def _upload_line(upload: Upload, as_json: bool) -> str:
    if as_json:
        return (
            f'{{"key": {encode_basestring(upload.key)}, '
            f'"upload_id": {encode_basestring(upload.upload_id)}, '
            f'"initiated": {encode_basestring(upload.initiated)}}}\n'
        )
    try:
        stamp = _local_stamp(datetime.fromisoformat(upload.initiated).timestamp())
    except ValueError:  # not a time the server should send: as it sent it
        stamp = upload.initiated
    return f"{stamp} {escape_key(f'{upload.key} {upload.upload_id}')}\n"


def _version_line(version: S3Version, as_json: bool, human: bool) -> str:
    if as_json:
        stamp = _utc_stamp(version.last_modified)
        return (
            f'{{"key": {encode_basestring(version.key)}, '
            f'"version_id": {encode_basestring(version.version_id)}, '
            f'"is_latest": {"true" if version.is_latest else "false"}, '
            f'"delete_marker": {"true" if version.delete_marker else "false"}, '
            f'"size": {version.size}, "last_modified": "{stamp}", '
            f'"etag": {encode_basestring(version.etag)}, '
            f'"storage_class": {encode_basestring(version.storage_class)}}}\n'
        )
    stamp = _local_stamp(version.last_modified.timestamp())
    size: str | int = "DELETE" if version.delete_marker else version.size
    if human and not version.delete_marker:
        size = human_size(version.size)
    latest = " (latest)" if version.is_latest else ""
    # the version id is the server's to say: escaped as the key is
    return f"{stamp} {size:>10} {escape_key(f'{version.key} {version.version_id}')}{latest}\n"


def _list_buckets(options: ListOptions, as_json: bool, out: Out) -> None:
    """``aws s3 ls`` with no bucket: each bucket's creation time and name."""
    loop = new_event_loop()
    try:
        with _exit_statuses():
            buckets = _run_listing(loop, list_buckets(options=options))
            for bucket in buckets:
                if as_json:
                    created = _utc_stamp(bucket.created)
                    line = f'{{"name": {encode_basestring(bucket.name)}, "created": "{created}"}}'
                else:
                    line = f"{_local_stamp(bucket.created.timestamp())} {escape_key(bucket.name)}"
                out.line(line)
    finally:
        loop.close()


async def _run(url: str, options: ListOptions, writer: Writer, progress: Progress | None) -> None:
    # aclosing: when writing fails (a closed pipe) the listing's tasks are
    # cancelled and awaited here, on the loop, not left for the loop's close.
    async with aclosing(list_pages(url, options=options)) as pages:
        async for page in pages:
            writer.write(page)
            if progress is not None:
                progress.update(writer.objects)


class Writer:
    """A listing's lines, a page at a time, and its counts (--summarize, the
    exit status): one loop, the line's format the subclass's."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.objects = 0
        self.prefixes = 0
        self.bytes = 0
        self.human = False

    def write(self, page: list[Entry]) -> None:
        prefix_line, object_line = self._prefix_line, self._object_line
        lines = []
        for entry in page:
            if isinstance(entry, CommonPrefix):
                self.prefixes += 1
                lines.append(prefix_line(entry))
            else:
                self.objects += 1
                self.bytes += entry.size
                lines.append(object_line(entry))
        self._put(lines)

    def _prefix_line(self, entry: CommonPrefix) -> str:
        raise NotImplementedError

    def _object_line(self, entry: S3Object) -> str:
        raise NotImplementedError

    def _put(self, lines: list[str]) -> None:
        self.out.write("".join(lines))

    def summary(self) -> None:
        # as aws s3 ls --summarize prints it, on stdout
        size = human_size(self.bytes) if self.human else self.bytes
        self.out.write(f"\nTotal Objects: {self.objects}\n   Total Size: {size}\n")


class TextWriter(Writer):
    """``aws s3 ls`` lines: local date and time, size right-aligned in ten, key."""

    def __init__(self, out: Out, strip: int, human: bool = False) -> None:
        super().__init__(out)
        self.strip = strip
        self.human = human
        self._stamps: dict[int, str] = {}

    def _stamp(self, when: datetime) -> str:
        # Cached by the second, in local time as aws prints it: MinIO's
        # timestamps carry milliseconds, so a cache by datetime missed nearly
        # always and astimezone + strftime cost ~5 us an object.
        second = int(when.timestamp())
        text = self._stamps.get(second)
        if text is None:
            if len(self._stamps) > 4096:
                self._stamps.clear()
            text = self._stamps[second] = _local_stamp(second)
        return text

    def _prefix_line(self, entry: CommonPrefix) -> str:
        return f"{'PRE':>30} {entry.prefix[self.strip :]}\n"

    def _object_line(self, entry: S3Object) -> str:
        size = human_size(entry.size) if self.human else entry.size
        return f"{self._stamp(entry.last_modified)} {size:>10} {entry.key[self.strip :]}\n"

    def _put(self, lines: list[str]) -> None:
        text = "".join(lines)
        if _CONTROL.search(text, 0, len(text) - 1) is not None:  # rare: one scan a page
            text = "".join(escape_key(line[:-1]) + "\n" for line in lines)
        self.out.write(text)


class JsonWriter(Writer):
    """One object per line: key, size, last_modified (ISO 8601, UTC), etag,
    storage_class; a common prefix is ``{"prefix": ...}``."""

    def __init__(self, out: Out) -> None:
        super().__init__(out)
        self._stamps: dict[datetime, str] = {}

    def _prefix_line(self, entry: CommonPrefix) -> str:
        return f'{{"prefix": {encode_basestring(entry.prefix)}}}\n'

    def _object_line(self, entry: S3Object) -> str:
        when = entry.last_modified
        stamp = self._stamps.get(when)
        if stamp is None:
            stamp = self._stamps[when] = _utc_stamp(when)
        return (
            f'{{"key": {encode_basestring(entry.key)}, "size": {entry.size}, '
            f'"last_modified": "{stamp}", "etag": {encode_basestring(entry.etag)}, '
            f'"storage_class": {encode_basestring(entry.storage_class)}}}\n'
        )

    def summary(self) -> None:
        # stdout carries JSON lines only: the summary goes to stderr
        tell(f"Total Objects: {self.objects}\n   Total Size: {self.bytes}")


class Progress(ProgressLine):
    """Objects so far and the rate, rewritten a few times a second."""

    def update(self, objects: int) -> None:
        elapsed = self.due()
        if elapsed is None:
            return
        rate = objects / elapsed if elapsed > 0 else 0.0
        self.show(f"{counted(objects, 'object')}  {rate:,.0f}/s")


def human_size(size: int) -> str:
    """A size as aws s3 ls --human-readable writes it (awscli's
    human_readable_size): "1 Byte", "10 Bytes", "1.0 KiB", ... base 1024."""
    if size == 1:
        return "1 Byte"
    if size < 1024:
        return f"{size} Bytes"
    for power, suffix in enumerate(("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"), start=2):
        unit = 1024**power
        if round(size / unit * 1024) < 1024:
            return f"{1024 * size / unit:.1f} {suffix}"
    return f"{1024 * size / 1024**7:.1f} EiB"


def _die(message: str) -> NoReturn:
    die("surge s3 ls", message)


def _fail(error: UsageError | S3Error) -> NoReturn:
    """One line; exit 2 for what is the caller's to fix (a usage error, no such
    bucket, access denied), 1 for a listing that failed otherwise."""
    if isinstance(error, S3Error) and not error.is_usage:
        tell(error_line("surge s3 ls", str(error)))
        sys.exit(1)
    _die(str(error))


# -- surge s3 cp ----------------------------------------------------------------------


class _OrderedFilters(click.Command):
    """Keeps the command line's tokens: --include and --exclude are applied in
    the order given (the AWS CLI's rule: the last match wins), which click's
    two separate lists would lose."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["surge.argv"] = list(args)
        return super().parse_args(ctx, args)


def filter_order(
    argv: list[str], include: tuple[str, ...], exclude: tuple[str, ...]
) -> list[FilterRule]:
    """The filters in command-line order, as ("include" | "exclude", pattern);
    if the tokens cannot be read back (an unusual spelling), the excludes, then
    the includes."""
    rules: list[FilterRule] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            break
        name, eq, value = token.partition("=")
        if name in ("--include", "--exclude"):
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            rules.append(("include" if name == "--include" else "exclude", value))
        i += 1
    if sorted(p for k, p in rules if k == "include") == sorted(include) and sorted(
        p for k, p in rules if k == "exclude"
    ) == sorted(exclude):
        return rules
    return [("exclude", p) for p in exclude] + [("include", p) for p in include]


def parse_size(text: str) -> int:
    """``8388608``, ``8MiB``, ``8MB``, ``512KiB``: bytes (MB as MiB, as the AWS
    CLI reads its multipart_chunksize)."""
    units = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    cleaned = text.strip().lower().replace("ib", "").replace("b", "") if text else ""
    number = cleaned.rstrip("kmg")
    unit = cleaned[len(number) :]
    if not number.isdigit() or unit not in units:
        raise UsageError(f"{text!r}: expected a size such as 8MiB, 512KiB or 1048576")
    return int(number) * units[unit]


#: Options of every command that sends object requests (cp, sync, rm, mv).
_ENDPOINT_OPTIONS: list[Any] = [
    click.option(
        "--retries",
        type=click.IntRange(0, 100),
        default=5,
        show_default=True,
        help="Retries of a request that failed transiently (SlowDown, 5xx, a reset "
        "or timeout), with jittered back-off.",
    ),
    *_WHERE_OPTIONS,
    _timeouts_and_debug,
    click.option(
        "--delete-batch",
        type=click.IntRange(1, 1000),
        default=1000,
        hidden=True,  # S3's 1,000 is the fastest; a smaller batch is for tests
        help="Keys a DeleteObjects request.",
    ),
]
#: The AWS CLI's filters and --dryrun (cp, sync, rm, mv).
_FILTER_OPTIONS: list[Any] = [
    click.option(
        "--include", multiple=True, metavar="GLOB", help="Take keys matching (aws's rule)."
    ),
    click.option(
        "--exclude", multiple=True, metavar="GLOB", help="Leave keys matching (aws's rule)."
    ),
    click.option("--dryrun", is_flag=True, help="Print what would be copied; write nothing."),
]
_OUTPUT_OPTIONS: list[Any] = [
    click.option("--quiet", "-q", is_flag=True, help="Print nothing but usage errors."),
    click.option("--only-show-errors", is_flag=True, help="No line per object; errors only."),
]


def _sse_c(name: str, what: str) -> list[Any]:
    """An SSE-C pair of options as the AWS CLI's: ``--NAME [AES256]`` and ``--NAME-key``."""
    return [
        click.option(
            f"--{name}",
            is_flag=False,
            flag_value="AES256",
            default=None,
            metavar="[AES256]",
            help=f"SSE-C: {what} encrypted with a key of yours (AES256, the only choice).",
        ),
        click.option(
            f"--{name}-key",
            metavar="KEY|fileb://PATH",
            help=f"The SSE-C key of {what}: its 32 bytes, or fileb:// a file holding them.",
        ),
    ]


#: How uploaded and copied objects are stored (surge.s3.putoptions), and SSE-C
#: keys; the AWS CLI's names.  A download takes --sse-c and --sse-c-key only
#: (the others, as the AWS CLI's, do nothing there).
_PUT_OPTIONS: list[Any] = [
    click.option(
        "--storage-class",
        metavar="CLASS",
        help="STANDARD, REDUCED_REDUNDANCY, STANDARD_IA, ONEZONE_IA, INTELLIGENT_TIERING,"
        " GLACIER, DEEP_ARCHIVE, GLACIER_IR or EXPRESS_ONEZONE.",
    ),
    click.option(
        "--sse",
        is_flag=False,
        flag_value="AES256",
        default=None,
        metavar="[AES256|aws:kms|aws:kms:dsse]",
        help="Server-side encryption (alone: AES256).",
    ),
    click.option("--sse-kms-key-id", metavar="ID", help="The KMS key of --sse aws:kms."),
    *_sse_c("sse-c", "the objects written or read"),
    *_sse_c("sse-c-copy-source", "a copy's source objects"),
    click.option("--content-type", metavar="TYPE", help="Default: guessed from the file's name."),
    click.option(
        "--guess-mime-type/--no-guess-mime-type",
        default=True,
        show_default=True,
        help="Guess a Content-Type from the file's name when none is given.",
    ),
    *(
        click.option(f"--{header}", metavar="VALUE", help=f"The objects' {title} header.")
        for header, title in (
            ("cache-control", "Cache-Control"),
            ("content-disposition", "Content-Disposition"),
            ("content-encoding", "Content-Encoding"),
            ("content-language", "Content-Language"),
        )
    ),
    click.option("--expires", metavar="TIME", help="An ISO 8601 time, e.g. 2030-01-31T12:00:00Z."),
    click.option(
        "--metadata",
        metavar="KEY=VALUE,...|JSON",
        help="User metadata (x-amz-meta-*); on a copy between buckets it implies"
        " --metadata-directive REPLACE.",
    ),
    click.option(
        "--acl",
        metavar="ACL",
        help="A canned ACL: private, public-read, public-read-write, authenticated-read,"
        " aws-exec-read, bucket-owner-read, bucket-owner-full-control, log-delivery-write.",
    ),
    click.option(
        "--checksum-algorithm",
        metavar="ALGORITHM",
        help="The checksum each upload is sent with and checked by: CRC32 (the default),"
        " CRC32C, SHA1, SHA256 or CRC64NVME.",
    ),
]
#: Where a copy's source is when not where the destination is (aws-cli's
#: --source-region; the endpoint and profile as rclone's two remotes): a
#: source on another endpoint, or read with other credentials, is relayed
#: through this machine (surge.s3.copies).
_SOURCE_OPTIONS: list[Any] = [
    click.option(
        "--source-endpoint-url",
        metavar="URL",
        help="Copies between buckets: the source's S3-compatible server (default: the"
        " destination's, or --source-profile's).",
    ),
    click.option(
        "--source-region",
        metavar="REGION",
        help="Copies between buckets: the source bucket's region (default: --source-profile's,"
        " else the destination's).",
    ),
    click.option(
        "--source-profile",
        metavar="NAME",
        help="Copies between buckets: the source's credentials (and endpoint, region) from"
        " this profile of the AWS config files.",
    ),
    click.option(
        "--source-no-sign-request",
        is_flag=True,
        default=None,
        help="Copies between buckets: the source is read anonymously (a public bucket);"
        " its bytes then go through this machine.",
    ),
]
#: The flags of _PUT_OPTIONS that a download takes too.
_READ_FLAGS = ("sse_c", "sse_c_key")


def _put_keywords(flags: dict[str, Any], copying: bool) -> dict[str, Any]:
    """The _PUT_OPTIONS flags given, as :class:`PutOptions` keywords (the
    copy-source key for a copy only)."""
    from surge.s3.putoptions import parse_metadata, read_key

    out = {name: value for name, value in flags.items() if value is not None}
    for name in ("sse_c_key", "sse_c_copy_source_key"):
        if name in out:
            out[name] = read_key(out[name])
    if "metadata" in out:
        out["metadata"] = parse_metadata(out["metadata"])
    if not copying:
        for name in (
            "sse_c_copy_source",
            "sse_c_copy_source_key",
            "source_endpoint_url",
            "source_region",
            "source_profile",
            "source_no_sign_request",
        ):
            if name in out:
                raise UsageError(f"--{name.replace('_', '-')} is for a copy between buckets")
    return out


def _transfer_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options cp and sync share (the AWS CLI's names, s5cmd's defaults)."""
    options: list[Any] = [
        click.argument("source"),
        click.argument("destination"),
        *_FILTER_OPTIONS,
        click.option(
            "--concurrency",
            type=click.IntRange(1, 4096),
            default=256,
            show_default=True,
            help="Requests in flight: objects and parts of big ones (s5cmd's --numworkers).",
        ),
        click.option(
            "--part-size",
            default=None,
            help="Big objects are read in ranged GETs (or uploaded in parts) of this size, in"
            " parallel; an upload's parts grow to fit 10,000.  [default: 8MiB; a download's"
            " ranges grow with the object, to 1/8 of it up to 64MiB]",
        ),
        click.option(
            "--multipart-threshold",
            default=None,
            help="Objects larger than this go in parts (default: the part size).",
        ),
        *_ENDPOINT_OPTIONS,
        click.option(
            "--metadata-directive",
            type=click.Choice(["COPY", "REPLACE"], case_sensitive=False),
            help="Copies between buckets: keep the source's metadata (COPY, the default)"
            " or replace it (REPLACE: what the options below give, no Content-Type"
            " guessed, as the AWS CLI).",
        ),
        *_PUT_OPTIONS,
        *_SOURCE_OPTIONS,
        click.option(
            "--follow-symlinks/--no-follow-symlinks",
            default=True,
            show_default=True,
            help="Uploads: follow symbolic links to files and directories (as the AWS"
            " CLI), or leave every link out.",
        ),
        *_OUTPUT_OPTIONS,
        click.option(
            "--json-summary", is_flag=True, help="A JSON summary on stdout (no object lines)."
        ),
        click.option("--no-progress", is_flag=True, help="No progress line, even on a terminal."),
        click.pass_context,
    ]
    for option in reversed(options):
        command = option(command)
    return command


@s3_group.command("cp", cls=_OrderedFilters)
@click.option("--recursive", "-r", is_flag=True, help="Every object under the prefix.")
@_transfer_options
def cp_command(ctx: click.Context, **flags: Any) -> None:
    """Copy s3://BUCKET/KEY to a file or directory, or (--recursive) every object
    under s3://BUCKET/PREFIX/ into a directory; or upload a file to
    s3://BUCKET/KEY (or into s3://BUCKET/PREFIX/), or (--recursive) every file
    under a directory, as aws s3 cp.

    A downloaded file appears under its name only once complete and verified
    (length, MD5 of single-part ETags, x-amz-checksum-*); an uploaded one is
    sent with its CRC32 (x-amz-checksum-crc32), which the server checks before
    it stores it, and files over the threshold go as multipart uploads, their
    parts' CRC32s and the whole file's too (aborted if they fail or are
    interrupted). Exit status: 0 all copied, 1 some object failed (each named
    on stderr), 2 usage error, 130 interrupted (143 SIGTERM, 129 SIGHUP)."""
    _transfer(ctx, "surge s3 cp", sync=False, delete=False, **flags)


@s3_group.command("sync", cls=_OrderedFilters)
@click.option("--delete", is_flag=True, help="Remove what the source lacks (filters apply).")
@_transfer_options
def sync_command(ctx: click.Context, **flags: Any) -> None:
    """Make a directory hold what s3://BUCKET/PREFIX/ holds, or the other way, as
    aws s3 sync: an object (or file) is copied unless the destination has it
    with the same size and no older (by whole seconds). A downloaded file's
    mtime is its object's LastModified, so the next sync finds it the same;
    an interrupted cp or sync resumes where it stopped. Exit status as cp."""
    _transfer(ctx, "surge s3 sync", sync=True, recursive=True, **flags)


@s3_group.command("rm", cls=_OrderedFilters)
@click.argument("urls", nargs=-1, required=True, metavar="s3://BUCKET/KEY...")
@click.option("--recursive", "-r", is_flag=True, help="Every object under each prefix.")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 4096),
    default=256,
    show_default=True,
    help="Requests in flight at most (DeleteObjects: 8 at most; aborts: 32).",
)
@click.option(
    "--all-versions",
    is_flag=True,
    help="Every version and delete marker of each key (s5cmd's flag): nothing of it is left.",
)
@click.option(
    "--incomplete",
    is_flag=True,
    help="Abort each key's multipart uploads in progress (with --recursive: every one under"
    " the prefix); the objects stay.",
)
@lambda command: _with(_FILTER_OPTIONS + _ENDPOINT_OPTIONS + _OUTPUT_OPTIONS, command)
@click.pass_context
def rm_command(
    ctx: click.Context,
    /,
    urls: tuple[str, ...],
    recursive: bool,
    concurrency: int,
    all_versions: bool,
    incomplete: bool,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    dryrun: bool,
    quiet: bool,
    only_show_errors: bool,
    debug: bool,
    **endpoint: Any,
) -> None:
    """Delete s3://BUCKET/KEY (one or many), or (--recursive) every object under
    s3://BUCKET/PREFIX/, as aws s3 rm: one "delete: s3://..." line per object
    once the server confirms it.  Deleted 1,000 keys a DeleteObjects request,
    as the listing goes.  --all-versions: every version and delete marker
    (a "delete: s3://... (version ID)" line each); --incomplete: the multipart
    uploads in progress aborted (an "abort: s3://... (upload id ID)" line
    each).  Exit status: 0 all deleted, 1 some key failed (each named on
    stderr), 2 usage error, 130 interrupted (every key deleted is printed)."""
    from surge.s3.deletes import RemoveOptions, remove_async
    from surge.s3.transfer import Result

    command = "surge s3 rm"
    out = None if quiet or only_show_errors else _stdout(command)

    verb = "abort" if incomplete else "delete"

    def on_result(result: Result) -> None:
        # the version or upload id is the server's to say: escaped as the key is
        what = f"{result.destination}{_version_or_upload(result)}"
        if result.failure is not None:
            if not quiet:
                failure = result.failure
                tell(escape_key(f"{verb} failed: {what}: {failure.code}: {failure.message}"))
        elif out is not None:
            out.line(escape_key(f"{'(dryrun) ' if result.dryrun else ''}{verb}: {what}"))

    try:
        options = RemoveOptions(
            recursive=recursive,
            filters=filter_order(ctx.meta.get("surge.argv", []), include, exclude),
            dryrun=dryrun,
            concurrency=concurrency,
            all_versions=all_versions,
            incomplete=incomplete,
            on_result=on_result,
            **_where(endpoint),
            **endpoint,
        )
        work = remove_async(list(urls), options=options)
    except UsageError as e:
        die(command, str(e))
    _debug(debug)
    summary = _run_command(command, work)
    sys.exit(1 if summary.failed else 0)


def _version_or_upload(result: Any) -> str:
    """What a line says after the URL of a version deleted or an upload aborted."""
    if result.version_id is not None:
        return f" (version {result.version_id})"
    if result.upload_id is not None:
        return f" (upload id {result.upload_id})"
    return ""


def _run_command(
    command: str, work: Coroutine[Any, Any, T], stopped: Callable[[str], None] = tell
) -> T:
    """A command's run on its own loop, stopped by a signal as
    :func:`run_cleanly` says: one line (``stopped(line)`` says it, and what
    is left) and 128 + the signal's number; a usage error (and an S3 error
    that is the caller's to fix) one line and exit 2, another S3 error one
    line and exit 1."""
    try:
        loop = new_event_loop()
    except BaseException:
        work.close()  # never started: no "coroutine was never awaited"
        raise

    def stop_now(signum: int) -> None:
        """A second signal, or a cleanup past its bound: exit at once, saying
        what may be left (temporary files are removed by the next run)."""
        stopped(f"{command}: interrupted again: stopping now")
        os._exit(Interrupted(signum).status)

    try:
        return run_cleanly(loop, work, signals=STOP_SIGNALS, again=stop_now)
    except Interrupted as e:
        stopped(f"{command}: interrupted")
        sys.exit(e.status)
    except (UsageError, SinkError) as e:
        die(command, str(e))
    except S3Error as e:
        if e.is_usage:
            die(command, str(e))
        tell(error_line(command, str(e)))
        sys.exit(1)
    finally:
        loop.close()


@s3_group.command("mv", cls=_OrderedFilters)
@click.option("--recursive", "-r", is_flag=True, help="Every file or object under it.")
@_transfer_options
def mv_command(ctx: click.Context, **flags: Any) -> None:
    """Move a file or object (or, --recursive, every one under a directory or
    prefix) to S3, from S3, or between buckets, as aws s3 mv: each copied as
    cp copies it, and its source deleted only once its copy is confirmed
    (objects in batches of DeleteObjects).  One "move: SRC to DST" line per
    source deleted.  Interrupted, a source not yet deleted stays.  Exit
    status as cp."""
    _transfer(ctx, "surge s3 mv", sync=False, delete=False, move=True, **flags)


@s3_group.command("presign")
@click.argument("url", metavar="s3://BUCKET/KEY")
@click.option(
    "--expires-in",
    type=click.IntRange(1, 7 * 24 * 3600),
    default=3600,
    show_default=True,
    help="Seconds the URL is valid (7 days at most).",
)
@lambda command: _with(_ENDPOINT_OPTIONS, command)
def presign_command(url: str, expires_in: int, **endpoint: Any) -> None:
    """Print a URL that GETs s3://BUCKET/KEY without credentials until it
    expires, as aws s3 presign (SigV4 query signing; nothing is sent)."""
    from surge.s3.api import EndpointOptions
    from surge.s3.presigning import presign

    command = "surge s3 presign"
    out = _stdout(command)
    try:
        signed = presign(url, expires_in=expires_in, options=EndpointOptions(**_where(endpoint)))
        out.line(signed)
    except (UsageError, SinkError) as e:
        die(command, str(e))


@s3_group.command("mb")
@click.argument("url", metavar="s3://BUCKET")
@lambda command: _with(_ENDPOINT_OPTIONS, command)
def mb_command(url: str, **endpoint: Any) -> None:
    """Make a bucket (in --region, or the profile's), as aws s3 mb."""
    from surge.s3.buckets import make_bucket_async
    from surge.s3.transfer import TransferOptions

    command = "surge s3 mb"
    out = _stdout(command)
    try:
        options = TransferOptions(retries=endpoint["retries"], **_where(endpoint))
    except UsageError as e:
        die(command, str(e))
    _debug(endpoint["debug"])
    bucket = _run_command(command, make_bucket_async(url, options=options))
    out.line(escape_key(f"make_bucket: {bucket}"))


@s3_group.command("rb")
@click.argument("url", metavar="s3://BUCKET")
@click.option(
    "--force",
    is_flag=True,
    help="Delete every object first (as rm --recursive), and on a versioned bucket every"
    " version and delete marker, and abort uploads in progress.",
)
@lambda command: _with(_ENDPOINT_OPTIONS, command)
def rb_command(url: str, force: bool, **endpoint: Any) -> None:
    """Remove a bucket, as aws s3 rb; --force deletes its objects first
    (a "delete: ..." line each)."""
    from surge.s3.buckets import remove_bucket_async
    from surge.s3.transfer import Result, TransferOptions

    command = "surge s3 rb"
    out = _stdout(command)

    def on_result(result: Result) -> None:
        # a versioned bucket's versions and delete markers, and uploads in
        # progress, are told as rm --all-versions and rm --incomplete tell them
        what = f"{result.destination}{_version_or_upload(result)}"
        verb = "abort" if result.upload_id is not None else "delete"
        if result.failure is not None:
            failure = result.failure
            tell(escape_key(f"{verb} failed: {what}: {failure.code}: {failure.message}"))
        else:
            out.line(escape_key(f"{verb}: {what}"))

    try:
        options = TransferOptions(
            retries=endpoint["retries"],
            delete_batch=endpoint["delete_batch"],
            on_result=on_result,
            **_where(endpoint),
        )
    except UsageError as e:
        die(command, str(e))
    _debug(endpoint["debug"])
    summary = _run_command(command, remove_bucket_async(url, force=force, options=options))
    if summary is not None and summary.failed:
        tell(f"{command}: not removed: {counted(summary.failed, 'object')} could not be deleted")
        sys.exit(1)
    out.line(escape_key(f"remove_bucket: {url[5:].rstrip('/')}"))


def _fit_descriptors(command: str, concurrency: int, quiet: bool) -> int:
    """The concurrency the open-files limit holds: a slot holds a socket and a
    file.  The soft limit is raised to the hard one first (surge.bulk.limits,
    as surge fetch does); past that the concurrency is lowered and said so,
    rather than failing objects with EMFILE (macOS's default is 256)."""
    from surge.bulk.limits import fit_open_files, open_files_limit

    fitted = max(1, fit_open_files(2 * concurrency) // 2)
    if fitted < concurrency and not quiet:
        tell(
            f"{command}: the open-files limit is {open_files_limit()}; lowering "
            f"--concurrency from {concurrency} to {fitted} (raise it with 'ulimit -n')"
        )
    return min(fitted, concurrency)


def _transfer(
    ctx: click.Context,
    command: str,
    *,
    sync: bool,
    delete: bool,
    move: bool = False,
    source: str,
    destination: str,
    recursive: bool,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    dryrun: bool,
    concurrency: int,
    part_size: str,
    multipart_threshold: str | None,
    retries: int,
    debug: bool,
    delete_batch: int,
    metadata_directive: str | None,
    follow_symlinks: bool,
    quiet: bool,
    only_show_errors: bool,
    json_summary: bool,
    no_progress: bool,
    **flags: Any,
) -> None:
    """cp and sync: the options built, the run, its lines and summary, the exit;
    ``flags``: the :data:`_WHERE_FLAGS` and the :data:`_PUT_OPTIONS` flags."""
    from surge.s3.transfer import (
        DownloadOptions,
        Result,
        TransferOptions,
        download_async,
        steady_heap,
    )

    steady_heap()  # this process is the transfer's: fewer page faults a GB

    copying = destination.startswith("s3://") and source.startswith("s3://")
    uploading = destination.startswith("s3://") and not copying
    if not uploading and not source.startswith("s3://"):
        die(command, f"{source!r} to {destination!r}: one of the two must be s3://bucket/...")
    verb = "move" if move else "copy" if copying else "upload" if uploading else "download"
    done = {"move": "moved", "copy": "copied"}.get(verb, f"{verb}ed")
    # `cp s3://b/k -`: the object is stdout's, as the AWS CLI's; no line joins it
    streaming = not uploading and not sync and names_stdout(destination)
    if streaming and json_summary:
        die(command, f"--json-summary and the destination {destination!r} are both stdout")
    lines = not (quiet or only_show_errors or json_summary or streaming)
    errors = not quiet
    # stdout is opened first if anything goes there: a closed one is a usage
    # error before anything is done
    out = _stdout(command) if lines or json_summary else None
    progress = Progress() if sys.stderr.isatty() and not (no_progress or quiet) else None

    def on_result(result: Result) -> None:
        failure = result.failure
        if result.left_aborted is not None:  # what a killed run left: said unless --quiet
            if errors:
                if progress is not None:
                    progress.close()
                tell(
                    escape_key(
                        f"{command}: aborted the incomplete multipart upload of"
                        f" {result.destination} that an earlier run left"
                        f" (upload id {result.left_aborted})"
                    )
                )
        elif result.skipped is not None:  # as the AWS CLI: a warning, and no failure
            if errors:
                if progress is not None:
                    progress.close()
                tell(escape_key(f"warning: skipping {result.source}: {result.skipped}"))
        elif failure is not None:
            if not errors:
                return
            if failure.code == "UnsafeKey":
                line = f"{failure.message.replace('skipping: ', f'skipping {failure.source}: ')}"
            elif result.deleted:  # sync --delete's: as rm says it
                line = f"delete failed: {result.destination}: {failure.code}: {failure.message}"
            else:
                line = (
                    f"{verb} failed: {failure.source} to {failure.destination}: "
                    f"{failure.code}: {failure.message}"
                )
            if progress is not None:
                progress.close()
            tell(escape_key(line))
        elif out is not None and lines:
            prefix = "(dryrun) " if result.dryrun else ""
            if progress is not None:
                progress.close()
            # a SinkError here (stdout full, its reader gone) ends the run
            if result.deleted:
                out.line(escape_key(f"{prefix}delete: {result.destination}"))
            else:
                out.line(escape_key(f"{prefix}{verb}: {result.source} to {result.destination}"))

    seen: dict[str, Any] = {}  # the run's summary, as progress shows it

    def on_progress(summary: Any) -> None:
        seen["summary"] = summary
        if progress is None:
            return
        elapsed = progress.due()
        if elapsed is None:
            return
        moved = summary.sent if uploading or copying else summary.received
        rate = moved / elapsed if elapsed > 0 else 0.0
        progress.show(
            f"{counted(summary.objects, 'object')}  {_bytes(moved)}  {_bytes(rate)}/s"
            f"  {summary.failed} failed"
        )

    concurrency = _fit_descriptors(command, concurrency, quiet)
    try:
        rules = filter_order(ctx.meta.get("surge.argv", []), include, exclude)
        common: dict[str, Any] = {
            "recursive": recursive,
            "filters": rules,
            "dryrun": dryrun,
            "sync": sync,
            "delete": delete,
            "concurrency": concurrency,
            "part_size": parse_size(part_size) if part_size else None,
            "multipart_threshold": (
                parse_size(multipart_threshold) if multipart_threshold else None
            ),
            "retries": retries,
            "delete_batch": delete_batch,
            **_where(flags),
            "on_result": on_result,
            "on_progress": on_progress,
        }
        options: TransferOptions
        run: Callable[..., Coroutine[Any, Any, Any]] = download_async
        stored = _put_keywords(flags, copying)
        if copying:
            from surge.s3.copies import CopyOptions, copy_async

            if not quiet:
                stored["on_relay"] = lambda why: tell(
                    f"{command}: copying through this machine, not by the server: {why}"
                    " (memory: 256 MiB, or --concurrency x --part-size if less, at most)"
                )
            options = CopyOptions(metadata_directive=metadata_directive, **stored, **common)
            run = copy_async
        elif uploading:
            from surge.s3.uploads import UploadOptions, upload_async  # a download needs none

            options = UploadOptions(follow_symlinks=follow_symlinks, **stored, **common)
            run = upload_async
        else:
            read = {name: value for name, value in stored.items() if name in _READ_FLAGS}
            options = DownloadOptions(**read, **common)
        if move:
            from surge.s3.moves import move_async

            run = move_async  # the copy, then each source deleted
        work = run(source, destination, options=options)
    except UsageError as e:
        die(command, str(e))
    try:
        _debug(debug)
    except BaseException:
        work.close()  # never started: no "coroutine was never awaited"
        raise

    def stopped(line: str) -> None:
        if progress is not None:
            progress.close()
        tell(line)
        _left(command, seen.get("summary"))

    summary = _run_command(command, work, stopped)
    if progress is not None:
        progress.close()
    if json_summary:
        assert out is not None
        try:
            out.line(json.dumps(summary.as_dict()))
        except SinkError as e:  # what was copied stays; one line says stdout failed
            die(command, str(e))
    if not (quiet or only_show_errors):  # the AWS CLI's: errors and warnings only
        what = f"would {verb}" if summary.dryrun else done
        rate = (
            ""
            if summary.dryrun
            else f" in {summary.seconds:.2f} s ({_bytes(summary.bytes_per_second)}/s)"
        )
        unverified = "" if uploading or copying else ": not verified"
        notes = "".join(f"; {note}{unverified}" for note in sorted(summary.notes))
        if sync:
            deleted = "would delete" if summary.dryrun else "deleted"
            notes = f", {summary.unchanged:,} unchanged, {deleted} {summary.deleted:,}{notes}"
        skipped = f", {summary.skipped:,} skipped" if summary.skipped else ""
        tell(
            f"{command}: {what} {counted(summary.objects, 'object')},"
            f" {_bytes(summary.bytes)}{rate}, {summary.failed} failed{skipped}{notes}"
        )
    sys.exit(1 if summary.failed else 0)


def _left(command: str, summary: Any) -> None:
    """One line for each multipart upload an interrupted run could not abort."""
    for upload_id, url in sorted((summary.open_uploads if summary else {}).items()):
        bucket, _, key = url[5:].partition("/")
        tell(
            f"{command}: the incomplete multipart upload of {escape_key(url)} is left"
            f" (upload id {upload_id}): aws s3api abort-multipart-upload --bucket"
            f" {shlex.quote(bucket)} --key {shlex.quote(key)} --upload-id {shlex.quote(upload_id)}"
        )


def counted(count: int, noun: str) -> str:
    """``1 object``, ``2 objects``, ``1,024 objects``: a count and its noun."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _bytes(count: float) -> str:
    """A byte count for people: 1.5 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover

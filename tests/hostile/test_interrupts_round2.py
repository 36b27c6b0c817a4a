"""Hostile round 2 of interruptions (docs/pool.md "Interruptions", docs/db.md
"Interrupts"): a signal handler that raises - KeyboardInterrupt, a timeout's
exception - anywhere in acquire, release or a ``with pool.connection()`` block
loses no slot and leaves no waiter; afterwards the pool hands out a correct
connection within its timeout, in a fresh session, nothing in use, nobody
waiting, and no other connection of the process is harmed.  The asyncio pools
claim the same under cancellation.

Cases the developers' own tests do not cover: seeded random SIGALRM offsets
under many-thread contention with overflow, in open transactions, streaming
cursors, executemany and big fetches; KeyboardInterrupt raised by the pool's
own callbacks; the handoff to the oldest waiter racing its interruption;
interrupted ``close()``; nested checkouts of two pools; a bare driver
connection and a second pool beside; fork after interruptions; asyncio
cancellation at random points.

The seed is printed; ``HOSTILE_SEED=<n>`` replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import inspect
import os
import random
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.conftest import require

import surge.db
from surge.pool import AsyncKeyedPool, AsyncPool, KeyedPool, Pool, PoolTimeout
from surge.testing import DBServer

SEED = int(os.environ.get("HOSTILE_SEED") or random.randrange(1 << 30))
print(f"test_interrupts_round2 seed: HOSTILE_SEED={SEED}", file=sys.stderr)


class Deadline(Exception):
    """What a timeout's signal handler raises (an Exception, not BaseException)."""


INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, Deadline)

#: surge.db's sync drivers (mysqlclient through driver="mysqlclient").
DRIVERS = ["pymysql", "mysqlclient", "psycopg"]


def rng_for(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


def why(name: str) -> str:
    here = "tests/hostile/test_interrupts_round2.py"
    return f"(seed {SEED}: HOSTILE_SEED={SEED} pytest {here} -k {name!r})"


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """No test hangs: after 120 s the stacks are dumped and the run ends."""
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


class Alarm:
    """SIGALRM that raises once per ``arm`` (KeyboardInterrupt or Deadline)."""

    def __init__(self) -> None:
        self.armed = False
        self.exc: type[BaseException] = KeyboardInterrupt
        self.fired = 0
        self.translated: list[str] = []
        self.old = signal.signal(signal.SIGALRM, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False
            self.fired += 1
            raise self.exc()

    def run(self, fn: Callable[[], Any], delay: float, exc: type[BaseException]) -> bool:
        """Run ``fn`` with the alarm set to ``delay``; True if it was interrupted.

        A driver may turn the interruption into an error of its own (psycopg's
        cleanup of a pipeline, say): an error other than an AssertionError,
        raised in a run whose alarm fired, counts as the interruption (kept in
        ``translated``).  The same error in a run the alarm never reached is a
        broken connection handed out: it propagates."""
        fired = self.fired
        try:
            try:
                self.exc = exc
                self.armed = True
                signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
                fn()
            finally:
                self.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except INTERRUPTS:
            return True
        except AssertionError:
            raise
        except Exception as e:
            if self.fired == fired:
                raise AssertionError(
                    f"a checkout the alarm never reached failed: the pool handed out a "
                    f"connection broken by an earlier interruption: {e!r}"
                ) from e
            self.translated.append(repr(e))
            return True
        return False

    def restore(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


@pytest.fixture
def alarm() -> Iterator[Alarm]:
    a = Alarm()
    try:
        yield a
    finally:
        a.restore()


# --------------------------------------------------------------------------
# surge.pool: a resource that knows who holds it


class Res:
    def __init__(self, n: int) -> None:
        self.n = n
        self.holder: object | None = None
        self.closed = 0

    def __repr__(self) -> str:
        return f"Res({self.n}, holder={self.holder}, closed={self.closed})"


class Book:
    """The resources a pool made, with callbacks that widen the windows."""

    def __init__(self) -> None:
        self.made: list[Res] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def create(self, key: object = None) -> Res:
        with self.lock:
            r = Res(len(self.made))
            self.made.append(r)
        spin()
        return r

    def check(self, r: Res, idle: float) -> bool:
        spin()
        return True

    def reset(self, r: Res) -> bool:
        spin()
        return True

    def close(self, r: Res) -> None:
        spin()
        r.closed += 1


def spin(n: int = 30) -> None:
    """A few bytecodes where a signal handler can run."""
    x = 0
    for i in range(n):
        x += i


def use(r: Res, book: Book, me: object, extra: int = 40) -> None:
    """The block of a checkout: the resource must be nobody's and open."""
    if r.holder is not None or r.closed:
        book.errors.append(f"{r!r} handed to {me} while held/closed")
    r.holder = me
    spin(extra)
    r.holder = None


def make_pool(kind: str, book: Book, **kw: Any) -> Any:
    common = dict(
        timeout=5.0,
        check=book.check,
        reset=book.reset,
        close=book.close,
        check_idle_after=0.0,
    )
    common.update(kw)
    if kind == "Pool":
        return Pool(book.create, max_size=2, max_overflow=1, **common)
    return KeyedPool(book.create, max_size=3, max_per_key=2, **common)


def checkout(pool: Any, kind: str, key: str = "a", timeout: float | None = None) -> Any:
    if kind == "Pool":
        return pool.connection() if timeout is None else pool.connection(timeout=timeout)
    return pool.connection(key) if timeout is None else pool.connection(key, timeout=timeout)


def assert_whole(pool: Any, kind: str, book: Book, name: str) -> None:
    """Nothing in use, nobody waiting, the whole capacity handed out at once
    within the timeout, every resource handed out open and nobody's."""
    stats = pool.stats()
    assert stats["in_use"] == 0, f"a slot is still in use after interruptions: {stats} {why(name)}"
    assert stats["waiting"] == 0, f"a waiter was left behind: {stats} {why(name)}"
    keys = ["a", "a", "b"] if kind == "KeyedPool" else [None, None, None]
    with contextlib.ExitStack() as stack:
        got = []
        for key in keys:
            try:
                got.append(stack.enter_context(checkout(pool, kind, key or "a", timeout=2.0)))
            except PoolTimeout as e:
                raise AssertionError(
                    f"a slot was lost: checkout {len(got) + 1} of the capacity timed out: {e} "
                    f"{pool.stats()} {why(name)}"
                ) from e
        for r in got:
            assert r.closed == 0, f"a closed resource was handed out: {r!r} {why(name)}"
        assert len({id(r) for r in got}) == len(got), f"one resource handed out twice: {got}"
    assert not book.errors, f"double handout / closed handout: {book.errors[:5]} {why(name)}"
    stats = pool.stats()
    assert stats["in_use"] == 0 and stats["waiting"] == 0, f"{stats} {why(name)}"


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool"])
def test_pool_random_alarms_under_four_thread_contention(kind: str, alarm: Alarm) -> None:
    """Main thread interrupted at seeded random offsets while three threads
    contend for max_size 2 (+1 overflow / max_size 3, max_per_key 2)."""
    name = f"test_pool_random_alarms_under_four_thread_contention[{kind}]"
    rng = rng_for(name)
    book = Book()
    pool = make_pool(kind, book)
    stop = threading.Event()
    worker_errors: list[BaseException] = []

    def worker(i: int) -> None:
        key = "ab"[i % 2]
        n = 0
        while not stop.is_set() and n < 20000:
            n += 1
            try:
                with checkout(pool, kind, key) as r:
                    use(r, book, f"worker{i}", extra=20)
            except BaseException as e:
                worker_errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    interrupted = 0
    deadline = time.monotonic() + 6
    try:
        for i in range(2000):
            if time.monotonic() > deadline:
                break
            key = rng.choice("ab")

            def block(key: str = key, i: int = i) -> None:
                with checkout(pool, kind, key) as r:
                    use(r, book, f"main{i}", extra=rng.randrange(10, 200))

            interrupted += alarm.run(block, rng.uniform(0, 4e-4), rng.choice(INTERRUPTS))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not any(t.is_alive() for t in threads), f"a worker hangs {why(name)}"
    assert not worker_errors, f"a worker's checkout failed: {worker_errors[:3]!r} {why(name)}"
    print(f"{name}: {interrupted} interrupted checkouts")
    assert interrupted > 10, "the test did not interrupt enough checkouts"
    assert_whole(pool, kind, book, name)
    pool.close()


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool"])
def test_control_the_same_contention_without_interrupts(kind: str) -> None:
    """The control of the test above: the same pool, callbacks and four
    contending threads, no signal.  It passes: what fails above is the
    interruption's doing, not plain contention's."""
    name = f"test_control_the_same_contention_without_interrupts[{kind}]"
    book = Book()
    pool = make_pool(kind, book)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        for _ in range(3000):
            try:
                with checkout(pool, kind, "ab"[i % 2]) as r:
                    use(r, book, f"worker{i}", extra=20 + 40 * (i == 3))
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads), f"a worker hangs {why(name)}"
    assert not errors, f"plain contention failed: {errors[:3]!r} {why(name)}"
    assert_whole(pool, kind, book, name)
    pool.close()


@pytest.mark.parametrize("where", ["create", "check", "reset", "close"])
@pytest.mark.parametrize("kind", ["Pool", "KeyedPool"])
def test_keyboardinterrupt_raised_by_a_callback(kind: str, where: str) -> None:
    """The pool's own callback raises KeyboardInterrupt (as if Ctrl-C landed in
    it) on a seeded third of its calls in the main thread, while two threads
    contend; blocks sometimes raise too, so resources get discarded and closed."""
    name = f"test_keyboardinterrupt_raised_by_a_callback[{kind}-{where}]"
    rng = rng_for(name)
    book = Book()
    main = threading.main_thread()
    live = [True]
    original = getattr(book, where)

    def hostile(*args: Any) -> Any:
        if live[0] and threading.current_thread() is main and rng.random() < 0.35:
            raise KeyboardInterrupt
        return original(*args)

    setattr(book, where, hostile)
    pool = make_pool(kind, book)
    stop = threading.Event()
    worker_errors: list[BaseException] = []

    def worker(i: int) -> None:
        n = 0
        while not stop.is_set() and n < 20000:
            n += 1
            try:
                with checkout(pool, kind, "a") as r:
                    use(r, book, f"worker{i}", extra=20)
            except BaseException as e:
                worker_errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    raised = 0
    try:
        for i in range(400):
            try:
                with checkout(pool, kind, rng.choice("ab")) as r:
                    use(r, book, f"main{i}")
                    if rng.random() < 0.2:
                        raise Deadline
            except (KeyboardInterrupt, Deadline):
                raised += 1
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    live[0] = False
    assert not any(t.is_alive() for t in threads), f"a worker hangs {why(name)}"
    assert not worker_errors, f"a worker's checkout failed: {worker_errors[:3]!r} {why(name)}"
    assert raised > 10
    assert_whole(pool, kind, book, name)
    pool.close()


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool", *DRIVERS])
def test_the_oldest_waiter_interrupted_as_the_resource_is_handed_to_it(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """max_size 1 (one per key): the main thread waits first, a second thread
    waits behind it; the holder returns the resource within +-300 us of the
    signal that interrupts the main thread - in its wait, in the handoff, in
    its block or in the block's return.  The resource (or its slot) must reach
    the second waiter within its timeout, not die with the interrupted one."""
    name = f"test_the_oldest_waiter_interrupted_as_the_resource_is_handed_to_it[{kind}]"
    rng = rng_for(name)
    book = Book()
    pool: Any
    server: DBServer | None = None
    if kind == "Pool":
        pool = Pool(book.create, max_size=1, timeout=5.0, close=book.close)
    elif kind == "KeyedPool":
        pool = KeyedPool(book.create, max_size=1, max_per_key=1, timeout=5.0, close=book.close)
    else:  # a surge.db pool of one connection; every holder runs a query
        server = server_for(request, kind)
        pool = surge.db.pool(server.url, max_size=1, timeout=5.0, **pool_options(kind))
        kind = "Pool"
    main_ident = threading.main_thread().ident
    assert main_ident is not None
    armed = [False]

    def handler(signum: int, frame: Any) -> None:
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, handler)

    def waiting(n: int) -> bool:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            if pool.stats()["waiting"] >= n:
                return True
            time.sleep(0.0005)
        return False

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    outcomes: dict[str, int] = {"main_got_it": 0, "main_interrupted": 0}
    try:
        for round_ in range(80 if server is None else 40):
            delta = rng.uniform(-3e-4, 3e-4)
            # busy: the holder keeps the GIL (the waiter wakes late); sleep: it
            # lets the woken waiter run at once
            pause = busy if rng.random() < 0.5 else time.sleep
            linger = rng.random() < 0.5
            held = checkout(pool, kind)
            conn = held.__enter__()
            if server is not None:
                token_ok(conn, rng)
            second: list[Any] = []

            def holder(
                held: Any = held,
                delta: float = delta,
                second: list[Any] = second,
                pause: Callable[[float], None] = pause,
            ) -> None:
                if not waiting(2):
                    second.append("nobody waits")
                if delta < 0:
                    signal.pthread_kill(main_ident, signal.SIGALRM)
                    pause(-delta)
                    held.__exit__(None, None, None)
                else:
                    held.__exit__(None, None, None)
                    pause(delta)
                    signal.pthread_kill(main_ident, signal.SIGALRM)

            def second_waiter(second: list[Any] = second) -> None:
                if not waiting(1):
                    second.append("main never waited")
                    return
                try:
                    with checkout(pool, kind, timeout=3.0) as r:
                        if server is not None:
                            token_ok(r, random.Random(0))
                        second.append(r)
                except BaseException as e:
                    second.append(e)

            t2 = threading.Thread(target=second_waiter, daemon=True)
            th = threading.Thread(target=holder, daemon=True)
            t2.start()
            th.start()
            armed[0] = True
            where = "nowhere (main was not interrupted)"
            try:
                try:
                    with checkout(pool, kind) as mine:
                        outcomes["main_got_it"] += 1
                        if server is not None:
                            one(mine, "SELECT 1")
                        # linger: the signal lands in the block; else the block
                        # ends at once and the signal lands in its return
                        end = time.perf_counter() + (0.02 if linger else 0)
                        while armed[0] and time.perf_counter() < end:
                            pass
                except KeyboardInterrupt as e:
                    outcomes["main_interrupted"] += 1
                    where = landed(e)
                finally:
                    armed[0] = False
            except KeyboardInterrupt:  # landed in the except clause above
                outcomes["main_interrupted"] += 1
                where = "the test's except clause"
            outcomes[where] = outcomes.get(where, 0) + 1
            th.join(5)
            t2.join(5)
            assert not th.is_alive() and not t2.is_alive(), (
                f"round {round_}: a thread hangs {why(name)}"
            )
            got = [x for x in second if not isinstance(x, str)]
            assert got and not isinstance(got[0], BaseException), (
                f"round {round_} (delta {delta * 1e6:.0f} us, {pause.__name__}): the waiter "
                f"behind the interrupted one did not get the returned resource within 3 s "
                f"(the interruption landed in {where}): {second!r} {pool.stats()} {why(name)}"
            )
            stats = pool.stats()
            assert stats["in_use"] == 0 and stats["waiting"] == 0, (
                f"round {round_}: slot or waiter left after the interrupted wait: "
                f"{stats} {why(name)}"
            )
    finally:
        signal.signal(signal.SIGALRM, old)
    print(name, outcomes)
    assert_whole_single(pool, kind, name)
    pool.close()


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool", *DRIVERS])
def test_a_return_interrupted_while_another_thread_waits(
    kind: str, request: pytest.FixtureRequest, alarm: Alarm
) -> None:
    """max_size 1: the main thread holds the only resource while a second
    thread waits for it; the main thread's block ends with the alarm set to a
    seeded 0-60 us, so it lands in the return.  The waiter - a checkout that
    finds nothing idle - must get a resource within its timeout (docs: an
    interrupted return is discarded "at the latest at the next checkout that
    finds nothing idle"), not time out with nothing in use."""
    name = f"test_a_return_interrupted_while_another_thread_waits[{kind}]"
    rng = rng_for(name)
    book = Book()
    pool: Any
    server: DBServer | None = None
    if kind == "Pool":
        pool = Pool(book.create, max_size=1, timeout=5.0, close=book.close, reset=book.reset)
    elif kind == "KeyedPool":
        pool = KeyedPool(
            book.create, max_size=1, max_per_key=1, timeout=5.0, close=book.close, reset=book.reset
        )
    else:
        server = server_for(request, kind)
        pool = surge.db.pool(server.url, max_size=1, timeout=5.0, **pool_options(kind))
        kind = "Pool"
    landings: dict[str, int] = {}
    for round_ in range(60 if server is None else 30):
        second: list[Any] = []

        def waiter(second: list[Any] = second) -> None:
            try:
                with checkout(pool, kind, timeout=2.0) as r:
                    if server is not None:
                        token_ok(r, random.Random(len(second)))
                    second.append(r)
            except BaseException as e:
                second.append(e)

        t2 = threading.Thread(target=waiter, daemon=True)
        delay = rng.uniform(0, 6e-5)
        where = "nowhere"
        try:
            try:
                alarm.exc = KeyboardInterrupt
                with checkout(pool, kind) as r:
                    if server is not None:
                        token_ok(r, rng)
                    t2.start()
                    end = time.monotonic() + 3
                    while pool.stats()["waiting"] < 1 and time.monotonic() < end:
                        time.sleep(0.0005)
                    alarm.armed = True
                    signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
                # the alarm lands in the return above, or here
                end = time.perf_counter() + 0.001
                while alarm.armed and time.perf_counter() < end:
                    pass
            except KeyboardInterrupt as e:
                where = landed(e)
            finally:
                alarm.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            where = "the test's except clause"
        landings[where] = landings.get(where, 0) + 1
        t2.join(5)
        assert not t2.is_alive(), f"round {round_}: the waiter hangs {why(name)}"
        assert second and not isinstance(second[0], BaseException), (
            f"round {round_} (alarm {delay * 1e6:.0f} us, landed in {where}): a thread already "
            f"waiting when the holder's return was interrupted did not get a resource within "
            f"its timeout, nothing in use: {second!r} {pool.stats()} {why(name)}"
        )
        stats = pool.stats()
        assert stats["in_use"] == 0 and stats["waiting"] == 0, f"{stats} {why(name)}"
    print(name, landings)
    assert_whole_single(pool, kind, name)
    pool.close()


def landed(e: BaseException) -> str:
    """Where a signal handler's exception was raised: the innermost frame that
    is not this file's (its handler's)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
    if not frames:
        return "the test's own block"
    f = frames[-1]
    return f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})"


def assert_whole_single(pool: Any, kind: str, name: str) -> None:
    try:
        with checkout(pool, kind, timeout=2.0):
            pass
    except PoolTimeout as e:
        raise AssertionError(f"the only slot was lost: {e} {why(name)}") from e


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool"])
def test_an_interrupted_close_closes_everything_once_when_called_again(
    kind: str, alarm: Alarm
) -> None:
    """close() with slow close callbacks, interrupted at a seeded random offset;
    a second close() must close every resource the pool held (none twice), and
    the pool must refuse checkouts.  (close() is not in the claim's list; this
    is what a user who hits Ctrl-C at shutdown and retries gets.)"""
    name = f"test_an_interrupted_close_closes_everything_once_when_called_again[{kind}]"
    rng = rng_for(name)
    for round_ in range(8):
        book = Book()

        def slow_close(r: Res) -> None:
            time.sleep(0.001)
            r.closed += 1

        if kind == "Pool":
            pool: Any = Pool(book.create, max_size=12, timeout=2.0, close=slow_close)
        else:
            pool = KeyedPool(book.create, max_size=12, max_per_key=6, timeout=2.0, close=slow_close)
        with contextlib.ExitStack() as stack:
            for i in range(12):
                stack.enter_context(checkout(pool, kind, "ab"[i % 2]))
        assert pool.stats()["idle"] == 12
        fired = alarm.fired
        exc = rng.choice(INTERRUPTS)
        alarm.run(pool.close, rng.uniform(0, 0.012), exc)
        # a Deadline raised inside a close callback is taken by the pool as that
        # close failing (logged): the resource it hit stays unclosed either way
        interrupted = alarm.fired > fired
        try:
            pool.close()
        except BaseException as e:
            raise AssertionError(
                f"round {round_}: close() after an interrupted close() raised {e!r} {why(name)}"
            ) from e
        twice = [r for r in book.made if r.closed > 1]
        never = [r for r in book.made if r.closed == 0]
        assert not twice, f"round {round_}: closed twice: {twice} {why(name)}"
        # the one the interruption hit inside its close callback may be left to
        # its finaliser; every other one is closed
        assert len(never) <= (1 if interrupted else 0), (
            f"round {round_} ({exc.__name__} fired={interrupted}): an interrupted close() forgot "
            f"the idle resources it had not closed yet - a second close() never closes them, "
            f"stats() counts them nowhere: {never} {pool.stats()} {why(name)}"
        )
        with pytest.raises(Exception), checkout(pool, kind, timeout=0.5):  # noqa: B017 - PoolClosed
            pass


@pytest.mark.parametrize("kind", ["Pool", "KeyedPool"])
def test_nested_checkouts_of_two_pools_interrupted(kind: str, alarm: Alarm) -> None:
    """``with a.connection(): with b.connection():`` interrupted anywhere: both
    pools whole, each resource back in its own pool."""
    name = f"test_nested_checkouts_of_two_pools_interrupted[{kind}]"
    rng = rng_for(name)
    books = [Book(), Book()]
    pools = [make_pool(kind, b) for b in books]
    interrupted = 0
    for i in range(500):

        def block(i: int = i) -> None:
            with checkout(pools[0], kind, "a") as a:
                use(a, books[0], f"outer{i}", extra=5)
                with checkout(pools[1], kind, "b") as b:
                    use(b, books[1], f"inner{i}", extra=5)
                    assert b in books[1].made and a in books[0].made, "crossed pools"
                spin(5)

        interrupted += alarm.run(block, rng.uniform(0, 2e-4), rng.choice(INTERRUPTS))
    assert interrupted > 10
    for p, b in zip(pools, books, strict=True):
        assert_whole(p, kind, b, name)
        p.close()


# --------------------------------------------------------------------------
# surge.db, sync: pymysql, mysqlclient, psycopg


def server_for(request: pytest.FixtureRequest, driver: str) -> DBServer:
    if driver == "mysqlclient":
        require("MySQLdb")
    fixture = "postgresql_server" if driver == "psycopg" else "mariadb_server"
    return request.getfixturevalue(fixture)


def pool_options(driver: str) -> dict[str, Any]:
    return {"driver": "mysqlclient"} if driver == "mysqlclient" else {}


def bare(server: DBServer, driver: str, **options: Any) -> Any:
    """A connection of the driver's own, beside the pool."""
    if driver == "mysqlclient":
        import MySQLdb

        conn = MySQLdb.connect(
            host=server.host,
            port=server.port,
            user=server.user,
            password=server.password,
            database=server.database,
        )
        conn.autocommit(options.get("autocommit", False))
        return conn
    return server.connect(**options)


def one(conn: Any, sql: str, args: Any = None) -> Any:
    cur = conn.cursor()
    cur.execute(sql, args)
    row = cur.fetchone()
    while cur.fetchone() is not None:
        pass
    cur.close()  # not in a finally: after an interrupted execute, mysqlclient's close
    return row  # raises "out of sync" (2014) in place of the interruption


def text(v: Any) -> Any:
    return v.decode() if isinstance(v, (bytes, bytearray)) else v


def token_ok(conn: Any, rng: random.Random) -> None:
    token = f"t{rng.randrange(10**9)}"
    got = text(one(conn, "SELECT %s", (token,))[0])
    assert got == token, f"a connection answered another query: sent {token}, got {got!r}"


def table_for(driver: str) -> str:
    return f"hostile8_{driver}"


def setup_table(server: DBServer, driver: str) -> None:
    conn = bare(server, driver, autocommit=True)
    t = table_for(driver)
    cur = conn.cursor()
    cur.execute(f"DROP TABLE IF EXISTS {t}")
    kind = " ENGINE=InnoDB" if server.kind == "mariadb" else ""
    cur.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, v VARCHAR(200)){kind}")
    cur.close()
    conn.close()


def big_sql(server: DBServer, n: int) -> str:
    if server.kind == "mariadb":
        return f"SELECT seq, REPEAT('x', 200) FROM seq_1_to_{n}"
    return f"SELECT g, repeat('x', 200) FROM generate_series(1, {n}) g"


MARK_SET = {"mariadb": "SET @hostile8 = 'dirty'", "postgresql": "SET app.hostile8 = 'dirty'"}
MARK_GET = {
    "mariadb": "SELECT @hostile8",
    "postgresql": "SELECT current_setting('app.hostile8', true)",
}


class Ids:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def take(self, k: int = 1) -> int:
        with self.lock:
            start = self.n
            self.n += k
            return start


def db_operation(
    kind: str, conn: Any, server: DBServer, driver: str, ids: Ids, rng: random.Random
) -> None:
    """One user's work inside a checkout, never committed."""
    t = table_for(driver)
    cur_kind: Any = None
    if kind == "txn":
        cur = conn.cursor()
        cur.execute(MARK_SET[server.kind])
        cur.execute(f"INSERT INTO {t} VALUES (%s, 'uncommitted')", (ids.take(),))
        cur.execute(big_sql(server, 3000))
        cur.fetchall()
        cur.close()
    elif kind == "executemany":
        start = ids.take(300)
        cur = conn.cursor()
        cur.executemany(
            f"INSERT INTO {t} VALUES (%s, %s)", [(start + i, "x" * 100) for i in range(300)]
        )
        cur.close()
    elif kind == "big":
        cur = conn.cursor()
        cur.execute(big_sql(server, 20000))
        assert len(cur.fetchall()) == 20000, "a big result came back short"
        cur.close()
    elif kind == "stream":
        if driver == "pymysql":
            import pymysql.cursors

            cur_kind = pymysql.cursors.SSCursor
            cur = conn.cursor(cur_kind)
        elif driver == "mysqlclient":
            import MySQLdb.cursors

            cur = conn.cursor(MySQLdb.cursors.SSCursor)
        else:
            cur = conn.cursor(name=f"h8_{rng.randrange(10**6)}")
        cur.execute(big_sql(server, 50000))
        for _ in range(rng.randrange(1, 6)):
            cur.fetchmany(500)
        # left unread on purpose: the release must cut or drain it (a query
        # after it in this block would be mysqlclient's "out of sync", by design)
        return
    else:
        token_ok(conn, rng)
    if rng.random() < 0.5:
        token_ok(conn, rng)


DB_OPS = ["query", "txn", "executemany", "big", "stream"]


def assert_db_whole(
    pool: Any, server: DBServer, driver: str, capacity: int, rng: random.Random, name: str
) -> None:
    stats = pool.stats()
    assert stats["in_use"] == 0, (
        f"a connection is still in use after interruptions: {stats} {why(name)}"
    )
    assert stats["waiting"] == 0, f"a waiter was left behind: {stats} {why(name)}"
    t = table_for(driver)
    with contextlib.ExitStack() as stack:
        conns = []
        for i in range(capacity):
            try:
                conns.append(stack.enter_context(pool.connection(timeout=5.0)))
            except PoolTimeout as e:
                raise AssertionError(
                    f"a slot was lost: checkout {i + 1} of {capacity} timed out: {e} {why(name)}"
                ) from e
        for c in conns:
            token_ok(c, rng)
            mark = one(c, MARK_GET[server.kind])[0]
            assert mark in (None, ""), (
                f"an interrupted user's session variable reached the next user: {mark!r} "
                f"{why(name)}"
            )
            n = one(c, f"SELECT COUNT(*) FROM {t}")[0]
            assert n == 0, (
                f"the next user sees {n} rows an interrupted transaction wrote {why(name)}"
            )
    check = bare(server, driver, autocommit=True)
    try:
        n = one(check, f"SELECT COUNT(*) FROM {t}")[0]
        assert n == 0, (
            f"{n} rows of never-committed interrupted transactions were committed {why(name)}"
        )
    finally:
        check.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_db_random_alarms_in_transactions_streams_and_fetches(
    driver: str, request: pytest.FixtureRequest, alarm: Alarm
) -> None:
    """Main thread: checkouts doing a BEGIN + write + read, executemany, a big
    fetch, a server-side cursor left half read, or a query, interrupted at a
    seeded random offset; three threads contend (max_size 2 + 1 overflow) and
    check every answer; a bare driver connection (reopened now and then, so it
    reuses freed descriptors) and a second pool are used after every
    interruption and must never fail."""
    name = f"test_db_random_alarms_in_transactions_streams_and_fetches[{driver}]"
    rng = rng_for(name)
    server = server_for(request, driver)
    setup_table(server, driver)
    pool = surge.db.pool(
        server.url, max_size=2, max_overflow=1, timeout=5.0, **pool_options(driver)
    )
    other = surge.db.pool(server.url, max_size=1, timeout=5.0, **pool_options(driver))
    beside = bare(server, driver, autocommit=True)
    ids = Ids()
    stop = threading.Event()
    worker_errors: list[BaseException] = []

    def worker(i: int) -> None:
        wr = random.Random(f"{SEED}:{name}:{i}")
        n = 0
        while not stop.is_set() and n < 5000:
            n += 1
            try:
                with pool.connection() as c:
                    token_ok(c, wr)
            except BaseException as e:
                worker_errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    interrupted = 0
    done = 0
    deadline = time.monotonic() + 5
    try:
        for i in range(400):
            if time.monotonic() > deadline:
                break
            op = rng.choice(DB_OPS)

            def block(op: str = op) -> None:
                with pool.connection() as c:
                    db_operation(op, c, server, driver, ids, rng)

            interrupted += alarm.run(block, rng.uniform(0, 0.015), rng.choice(INTERRUPTS))
            done += 1
            try:
                token_ok(beside, rng)
                if i % 4 == 0:
                    with other.connection() as c:
                        token_ok(c, rng)
            except AssertionError:
                raise
            except Exception as e:
                raise AssertionError(
                    f"after interrupted checkout {i} ({op}), another connection of the process "
                    f"broke: {e!r} {why(name)}"
                ) from e
            if i % 15 == 14:
                beside.close()
                beside = bare(server, driver, autocommit=True)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert not any(t.is_alive() for t in threads), f"a worker hangs {why(name)}"
    assert not worker_errors, (
        f"a contending thread's checkout failed (its connection harmed by another's "
        f"interruption? a 2013 '(timed out)' is surge's 1 s bound on an answer, which a "
        f"heavily loaded machine can hit too): {worker_errors[:3]!r} {why(name)}"
    )
    print(f"{name}: {interrupted}/{done} interrupted")
    assert interrupted > 10
    time.sleep(0.05)  # any late cut of the background reset has happened by now
    try:
        token_ok(beside, rng)
        with other.connection() as c:
            token_ok(c, rng)
    except Exception as e:
        raise AssertionError(f"a late cut ended another connection: {e!r} {why(name)}") from e
    assert_db_whole(pool, server, driver, 3, rng, name)
    beside.close()
    pool.close()
    other.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_db_nested_checkouts_of_two_pools_interrupted(
    driver: str, request: pytest.FixtureRequest, alarm: Alarm
) -> None:
    """``with a.connection(): with b.connection():`` both writing in a
    transaction, interrupted anywhere; neither pool loses a slot, neither
    commits, and each connection answers its own queries."""
    name = f"test_db_nested_checkouts_of_two_pools_interrupted[{driver}]"
    rng = rng_for(name)
    server = server_for(request, driver)
    setup_table(server, driver)
    a = surge.db.pool(server.url, max_size=1, timeout=5.0, **pool_options(driver))
    b = surge.db.pool(server.url, max_size=1, timeout=5.0, **pool_options(driver))
    ids = Ids()
    interrupted = 0
    for _ in range(60):

        def block() -> None:
            with a.connection() as ca:
                db_operation("txn", ca, server, driver, ids, rng)
                with b.connection() as cb:
                    db_operation(rng.choice(DB_OPS), cb, server, driver, ids, rng)
                    token_ok(ca, rng)

        interrupted += alarm.run(block, rng.uniform(0, 0.02), rng.choice(INTERRUPTS))
    assert interrupted > 5
    assert_db_whole(a, server, driver, 1, rng, name)
    assert_db_whole(b, server, driver, 1, rng, name)
    a.close()
    b.close()


def wait_child(pid: int, seconds: float) -> int | None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.parametrize("driver", DRIVERS)
def test_fork_right_after_an_interrupted_checkout(
    driver: str, request: pytest.FixtureRequest, alarm: Alarm
) -> None:
    """Interrupt a checkout, fork at once (the pool's background work may be
    mid-flight), and use the pool in the child: it gets a correct connection
    within its timeout; the parent's pool and a bare connection are unharmed."""
    name = f"test_fork_right_after_an_interrupted_checkout[{driver}]"
    rng = rng_for(name)
    server = server_for(request, driver)
    setup_table(server, driver)
    pool = surge.db.pool(server.url, max_size=2, timeout=5.0, **pool_options(driver))
    beside = bare(server, driver, autocommit=True)
    ids = Ids()
    forks = 0
    for i in range(40):
        op = rng.choice(DB_OPS)

        def block(op: str = op) -> None:
            with pool.connection() as c:
                db_operation(op, c, server, driver, ids, rng)

        if not alarm.run(block, rng.uniform(0, 0.01), rng.choice(INTERRUPTS)) or i % 4:
            continue
        forks += 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                os.close(r)
                with pool.connection(timeout=5.0) as c:
                    got = text(one(c, "SELECT %s", ("child",))[0])
                    mark = one(c, MARK_GET[server.kind])[0]
                    n = one(c, f"SELECT COUNT(*) FROM {table_for(driver)}")[0]
                os.write(w, f"{got}|{mark}|{n}".encode())
                code = 0
            except BaseException as e:
                with contextlib.suppress(BaseException):
                    os.write(w, f"error {e!r}".encode())
            finally:
                os._exit(code)
        os.close(w)
        code = wait_child(pid, 15)
        ready, _, _ = select.select([r], [], [], 1)
        said = os.read(r, 4096).decode() if ready else ""
        os.close(r)
        assert code == 0 and said.startswith("child|"), (
            f"the child forked after interrupted checkout {i} ({op}) could not use the pool: "
            f"exit {code}, said {said!r} {why(name)}"
        )
        assert said.split("|")[1] in ("None", ""), f"child saw a dirty session: {said} {why(name)}"
        assert said.split("|")[2] == "0", f"child saw uncommitted rows: {said} {why(name)}"
        try:
            token_ok(beside, rng)
            with pool.connection() as c:
                token_ok(c, rng)
        except Exception as e:
            raise AssertionError(
                f"the child harmed the parent's connections: {e!r} {why(name)}"
            ) from e
    assert forks >= 2, "too few forks"
    assert_db_whole(pool, server, driver, 2, rng, name)
    beside.close()
    pool.close()


# --------------------------------------------------------------------------
# asyncio: surge.pool.AsyncPool / AsyncKeyedPool


class ABook(Book):
    async def acreate(self, key: object = None) -> Res:
        await asyncio.sleep(0)
        return self.create(key)

    async def acheck(self, r: Res, idle: float) -> bool:
        await asyncio.sleep(0)
        return True

    async def areset(self, r: Res) -> bool:
        await asyncio.sleep(0)
        return True

    async def aclose(self, r: Res) -> None:
        await asyncio.sleep(0)
        r.closed += 1


def make_apool(kind: str, book: ABook) -> Any:
    kw = dict(timeout=5.0, check=book.acheck, reset=book.areset, close=book.aclose)
    if kind == "AsyncPool":
        return AsyncPool(book.acreate, max_size=2, max_overflow=1, **kw)
    return AsyncKeyedPool(book.acreate, max_size=3, max_per_key=2, **kw)


def acheckout(pool: Any, kind: str, key: str = "a", timeout: float | None = None) -> Any:
    args: list[Any] = [] if kind == "AsyncPool" else [key]
    return pool.connection(*args) if timeout is None else pool.connection(*args, timeout=timeout)


CUTS = ["cancel", "wait_for", "timeout", "taskgroup"]


async def cancel_somehow(coro_fn: Callable[[], Any], rng: random.Random, how: str = "") -> str:
    """Run one checkout and cut it at a random point: ``cancel`` after k loop
    turns, ``wait_for`` / ``asyncio.timeout`` of 0-3 ms, or a TaskGroup whose
    sibling fails after k turns (a random one of them if ``how`` is empty)."""
    how = how or rng.choice(CUTS)
    try:
        if how == "cancel":
            task = asyncio.ensure_future(coro_fn())
            for _ in range(rng.randrange(0, 8)):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif how == "wait_for":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(coro_fn(), rng.uniform(0, 0.003))
        elif how == "timeout":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(rng.uniform(0, 0.003)):
                    await coro_fn()
        else:
            k = rng.randrange(0, 8)

            async def sibling() -> None:
                for _ in range(k):
                    await asyncio.sleep(0)
                raise Deadline

            with contextlib.suppress(ExceptionGroup):
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(coro_fn())
                    tg.create_task(sibling())
    except Deadline:
        pass
    return how


async def assert_awhole(pool: Any, kind: str, book: Book, name: str) -> None:
    stats = pool.stats()
    assert stats["in_use"] == 0, f"a slot is still in use after cancellations: {stats} {why(name)}"
    assert stats["waiting"] == 0, f"a waiter was left behind: {stats} {why(name)}"
    keys = ["a", "a", "b"]
    async with contextlib.AsyncExitStack() as stack:
        got = []
        for key in keys:
            try:
                got.append(await stack.enter_async_context(acheckout(pool, kind, key, timeout=2.0)))
            except PoolTimeout as e:
                raise AssertionError(
                    f"a slot was lost after cancellations: checkout {len(got) + 1} of the "
                    f"capacity: {e}; stats before the checkouts: {stats} {why(name)}"
                ) from e
        for r in got:
            assert r.closed == 0, f"a closed resource was handed out: {r!r} {why(name)}"
    assert not book.errors, f"double handout / closed handout: {book.errors[:5]} {why(name)}"


@pytest.mark.parametrize("how", CUTS)
@pytest.mark.parametrize("kind", ["AsyncPool", "AsyncKeyedPool"])
def test_async_pool_cancelled_at_random_points_by_contending_tasks(kind: str, how: str) -> None:
    """Eight tasks contend for max_size 2 (+1 overflow / max_size 3, max_per_key
    2) with coroutine callbacks; every checkout is cut at a random point."""
    name = f"test_async_pool_cancelled_at_random_points_by_contending_tasks[{kind}-{how}]"
    rng = rng_for(name)
    book = ABook()

    async def main() -> None:
        pool = make_apool(kind, book)

        async def one_checkout(me: str, key: str) -> None:
            async with acheckout(pool, kind, key) as r:
                use(r, book, me, extra=5)
                for _ in range(rng.randrange(0, 4)):
                    await asyncio.sleep(0)
                if r.holder is not None:
                    book.errors.append(f"{r!r} shared across an await")

        async def user(i: int) -> None:
            for j in range(80):
                key = rng.choice("ab")
                await cancel_somehow(
                    lambda me=f"u{i}.{j}", key=key: one_checkout(me, key), rng, how
                )

        await asyncio.gather(*(user(i) for i in range(8)))
        await assert_awhole(pool, kind, book, name)
        await pool.close()

    asyncio.run(asyncio.wait_for(main(), 40))


# --------------------------------------------------------------------------
# asyncio: surge.db.async_pool with psycopg and aiomysql


async def aone(conn: Any, sql: str, args: Any = None, fetch: str = "one") -> Any:
    cur = conn.cursor()
    if inspect.isawaitable(cur):
        cur = await cur
    try:
        await cur.execute(sql, args)
        if fetch == "all":
            return await cur.fetchall()
        if fetch == "none":
            return None
        return await cur.fetchone()
    finally:
        res = cur.close()
        if inspect.isawaitable(res):
            await res


async def atoken_ok(conn: Any, rng: random.Random) -> None:
    token = f"t{rng.randrange(10**9)}"
    got = text((await aone(conn, "SELECT %s", (token,)))[0])
    assert got == token, f"a connection answered another query: sent {token}, got {got!r}"


async def abare(server: DBServer) -> Any:
    if server.kind == "mariadb":
        import aiomysql

        return await aiomysql.connect(
            host=server.host,
            port=server.port,
            user=server.user,
            password=server.password,
            db=server.database,
            autocommit=True,
        )
    import psycopg

    return await psycopg.AsyncConnection.connect(server.url, autocommit=True)


async def aclose(conn: Any) -> None:
    res = conn.close()
    if inspect.isawaitable(res):
        await res


@pytest.mark.parametrize("driver", ["aiomysql", "psycopg"])
def test_async_db_cancelled_in_transactions_and_big_fetches(
    driver: str, request: pytest.FixtureRequest
) -> None:
    """Four tasks contend for max_size 2; each checkout writes in a transaction
    and reads a big result and is cut at a random point (cancel after k loop
    turns, wait_for, asyncio.timeout, a TaskGroup sibling failing).  A bare
    connection and a second pool are used after each cut; afterwards the pool is
    whole, fresh and committed nothing."""
    require(driver)
    name = f"test_async_db_cancelled_in_transactions_and_big_fetches[{driver}]"
    rng = rng_for(name)
    server: DBServer = request.getfixturevalue(
        "postgresql_server" if driver == "psycopg" else "mariadb_server"
    )
    setup_table(server, "pymysql" if driver == "aiomysql" else "psycopg")
    t = table_for("pymysql" if driver == "aiomysql" else "psycopg")

    async def main() -> None:
        pool = surge.db.async_pool(server.url, max_size=2, timeout=5.0)
        other = surge.db.async_pool(server.url, max_size=1, timeout=5.0)
        beside = await abare(server)
        counter = [0]
        failures: list[str] = []

        async def work() -> None:
            async with pool.connection() as c:
                await aone(c, MARK_SET[server.kind])
                counter[0] += 1
                await aone(c, f"INSERT INTO {t} VALUES (%s, 'uncommitted')", (counter[0],), "none")
                rows = await aone(c, big_sql(server, rng.choice([10, 2000, 20000])), fetch="all")
                assert rows, "empty result"
                await atoken_ok(c, rng)

        async def user(i: int) -> None:
            mine = await abare(server)  # one bare connection per task: never shared
            try:
                await each_cut(i, mine)
            finally:
                await aclose(mine)

        async def each_cut(i: int, beside: Any) -> None:
            for j in range(25):
                await cancel_somehow(work, rng)
                try:
                    await atoken_ok(beside, rng)
                    if j % 5 == 0:
                        async with other.connection() as c:
                            await atoken_ok(c, rng)
                except AssertionError:
                    raise
                except Exception as e:
                    failures.append(f"user {i} after cut {j}: another connection broke: {e!r}")
                    return

        await asyncio.gather(*(user(i) for i in range(4)))
        assert not failures, f"{failures[:3]} {why(name)}"
        await asyncio.sleep(0.05)
        stats = pool.stats()
        assert stats["in_use"] == 0 and stats["waiting"] == 0, (
            f"slot or waiter left after cancellations: {stats} {why(name)}"
        )
        async with contextlib.AsyncExitStack() as stack:
            for k in range(2):
                try:
                    c = await stack.enter_async_context(pool.connection(timeout=5.0))
                except PoolTimeout as e:
                    raise AssertionError(
                        f"a slot was lost: checkout {k + 1} of 2: {e} {why(name)}"
                    ) from e
                await atoken_ok(c, rng)
                mark = (await aone(c, MARK_GET[server.kind]))[0]
                assert mark in (None, ""), (
                    f"a cancelled user's session variable leaked: {mark!r} {why(name)}"
                )
                n = (await aone(c, f"SELECT COUNT(*) FROM {t}"))[0]
                assert n == 0, f"the next user sees {n} rows of cancelled transactions {why(name)}"
        n = (await aone(beside, f"SELECT COUNT(*) FROM {t}"))[0]
        assert n == 0, (
            f"{n} rows of cancelled, never-committed transactions were committed {why(name)}"
        )
        await aclose(beside)
        await pool.close()
        await other.close()

    asyncio.run(asyncio.wait_for(main(), 40))

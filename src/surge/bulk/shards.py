"""What a Dask worker process runs for ``surge fetch --cluster``: shards, on one engine.

:func:`run_shard` is the Dask task: a shard's inputs in (as :func:`pack_inputs`
made them), their records out.
Dask runs tasks on the threads of a worker's pool, where no event loop runs
(an aiohttp session made there finds none: dask/dask #9738), and a task's
thread is not the place for one: a shard must not end with its slowest host.

So each worker process keeps one engine per job -- an event loop on a thread
of its own, one :class:`~surge.http.client.AsyncClient`, and ``concurrency`` fetcher
tasks pulling inputs from one FIFO queue -- and a shard task only puts its
inputs on that queue and waits for their records, out of Dask's thread pool
(``secede``).  The concurrency bound is the engine's, so it holds per worker
process however many threads the worker has.  The client keeps a second
shard queued on each engine, and a seceded task frees its thread, so the
second shard's inputs wait in the queue while the first one's run, with one
thread as with eight: when the first shard is down to its slowest hosts (a
host that hangs waits out ``max_time``, 30 s by default), its finished
requests' slots go straight to the next shard's inputs instead of idling
until the last straggler returns.  And when a shard's last input is taken,
the task tells the client (a Dask event on :data:`DRAINED_TOPIC`), which sends
the shard after next then, not when this one's stragglers are done.
Measured on ``local:2`` with one thread per worker, before ``secede``: the
engines sat idle ~3 s before each later shard, 20 % of the job's worker time;
after: 0.

A task that Dask cancels (the client stopped) is noticed within
:data:`CANCEL_POLL_S`: its inputs still queued are dropped and the task ends
(:class:`ShardCancelled`), rather than running its shard to the end for
nobody.  So does a task whose worker is closing, retired or shut down (a
worker waits for its running tasks before it closes), but it ends with
:class:`WorkerClosing`, which tells the client to send the shard again.

The engine lives while shards of its job are active, and :data:`LINGER_S`
after the last one, so consecutive shards share it; then it closes its
connections and its thread ends.
"""

from __future__ import annotations

import asyncio
import marshal
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from surge._log import logger as get_logger
from surge.bulk.engine import FetchOptions, Record, RunState, fetch_one
from surge.bulk.inputs import InputItem
from surge.bulk.limits import fit_open_files
from surge.bulk.outputs import encode_records
from surge.bulk.summary import Summary
from surge.gc_tuning import relaxed_gc
from surge.http.client import AsyncClient
from surge.loops import new_event_loop

#: Seconds an engine outlives the last active shard of its job.
LINGER_S = 2.0
#: How often a shard's task asks whether Dask still wants its result.
CANCEL_POLL_S = 0.2
#: Seconds to wait for an engine's loop to start or stop.
_THREAD_TIMEOUT_S = 30.0
#: marshal's format version for packed inputs (4: Python 3.4 and later).
_MARSHAL_VERSION = 4

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ShardOutcome:
    """A shard's records and where and when the worker ran it (for stats).

    Asked to encode, the worker sends the records as ``encoded`` (the output
    format's lines) with their ``summary``, and ``records`` is empty: a string
    crosses to the client far cheaper than 10,000 dicts (pickled, sent through
    the scheduler, unpickled), and the client only writes it.
    """

    records: list[Record]
    started: float  # time.time() on the worker when the task began
    finished: float  # ... and when its last record was done
    worker: str  # "host:pid"
    concurrency: int  # what the worker's engine ran with (lower if its open-files limit is)
    encoded: str | None = None  # the records in the output format, when asked
    summary: Summary | None = None  # ... and what they hold
    queued: float = 0.0  # time.time() when its inputs reached the engine's queue
    starved: float = 0.0  # engine-seconds the engine waited for input before that (see _Engine)


def pack_inputs(items: Sequence[InputItem]) -> bytes:
    """A shard's inputs as one ``bytes`` value, for :func:`run_shard` on a worker.

    Dask serialises a scattered list element by element: 10,000 inputs took
    0.9 s to scatter as a list of :class:`InputItem`, 6 ms as bytes.  Three
    columns through ``marshal`` encode in 3 ms here where pickling the items
    takes 17 ms (both ~0.55 MB); the worker decodes them in 17 ms.  marshal's
    format is Python's own: the client and the workers run the same Python
    (docs/cluster.md), as Dask's pickles need anyway.
    """
    columns = ([i.line for i in items], [i.input for i in items], [i.url for i in items])
    # an input that cannot be fetched (InputItem.problem) travels with its reason
    problems = {n: i.problem for n, i in enumerate(items) if i.problem is not None}
    return marshal.dumps((*columns, problems), _MARSHAL_VERSION)


def unpack_inputs(packed: bytes) -> list[InputItem]:
    """The inputs :func:`pack_inputs` packed."""
    lines, inputs, urls, problems = marshal.loads(packed)
    items = list(map(InputItem, lines, inputs, urls))
    for n, problem in problems.items():
        item = items[n]
        items[n] = InputItem(item.line, item.input, item.url, problem=problem)
    return items


def run_shard(
    job: str, packed: bytes, opts: FetchOptions, encode: str | None = None
) -> ShardOutcome:
    """The Dask task: fetch the inputs ``packed`` on this process's engine for ``job``.

    With ``encode`` (an output format), the records come back encoded, with
    their summary (see :class:`ShardOutcome`).
    """
    started = time.time()
    items = unpack_inputs(packed)
    engine = _acquire(job, opts)
    task = _dask_task()
    shard = _Shard(len(items), None if task is None else _tell_drained(*task))
    try:
        engine.put(items, shard)
        if task is not None:
            # Out of the worker's thread pool while the engine works: the next shard
            # sent here starts at once and queues its inputs behind these, so the
            # engine has input when these run out, whatever the worker's threads.
            from distributed import secede

            secede()  # type: ignore[no-untyped-call]
        records = engine.wait(shard, None if task is None else _given_up(*task))
    finally:
        _release(job, engine)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    encoded, summary = None, None
    if encode is not None:
        # Formatting the records is the job's own work (one process does it too),
        # so it is inside the task's run time, before ``finished``.
        summary = Summary()
        for record in records:
            summary.add(record)
        encoded = encode_records(records, encode, opts.extras)
        records = []
    return ShardOutcome(
        records,
        started,
        time.time(),
        worker,
        engine.opts.concurrency,
        encoded,
        summary,
        shard.queued,
        shard.starved,
    )


class ShardCancelled(Exception):
    """Dask no longer wants the shard's result: the job stopped."""


class WorkerClosing(Exception):
    """The shard's worker is closing (retired, or shut down) while its result is wanted.

    The task ends, its inputs dropped, rather than hold the worker open; the
    client sends the shard again, to another worker, as a new attempt.
    Without it the task would end as cancelled, an error to the client: a
    retired worker stopped the job, unless the scheduler removed the worker
    (and ran the task again elsewhere) before the task saw the worker closing.
    """


def _dask_task() -> tuple[Any, Any] | None:
    """The Dask worker and the key of the task running this code, or None."""
    try:
        from distributed import get_worker

        worker = get_worker()
        return worker, worker.get_current_task()
    except (ImportError, ValueError, KeyError):
        return None


#: The Dask event topic on which every surge job's shards say their inputs are all
#: taken; an event is the task's key, which names the job, the shard and the attempt.
DRAINED_TOPIC = "surge-drained"


def _tell_drained(worker: Any, key: Any) -> Callable[[], None]:
    """Tell the client (through the scheduler) that task ``key``'s inputs are all taken.

    From then on only its stragglers run, so the client sends the worker its
    next shard: a shard whose slowest hosts wait out ``max_time`` (30 s by
    default) would otherwise hold back the shard after next while the engine
    runs out of input.  One event of ~100 bytes per shard, on one topic for
    every job: the scheduler keeps a topic's last 1,000 events
    (``distributed.admin.low-level-log-length``) and never forgets a topic, so
    a topic per job kept up to 1,000 events per job for the scheduler's life.
    """

    def drained() -> None:
        worker.log_event(DRAINED_TOPIC, str(key))  # thread-safe: via the worker's loop

    return drained


def _given_up(worker: Any, key: Any) -> Callable[[], Exception | None]:
    """Why task ``key`` on ``worker`` is to end now, if it is: Dask gave it up, or the worker."""
    from distributed.core import Status

    def why() -> Exception | None:
        task = worker.state.tasks.get(key)
        if task is None or task.state in ("cancelled", "released"):
            return ShardCancelled("the shard's task was cancelled")
        if worker.status not in (Status.running, Status.paused):
            # closing_gracefully (retire_workers, close_gracefully), closing...
            return WorkerClosing(f"its worker {worker.address} is {worker.status.name}")
        return None

    return why


class _Shard:
    """One shard's records as they complete; ``done`` is set when all are in."""

    __slots__ = ("done", "drained", "error", "expected", "queued", "records", "starved", "taken")

    def __init__(self, expected: int, drained: Callable[[], object] | None = None) -> None:
        self.expected = expected
        self.records: list[Record] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.queued = 0.0  # time.time() when its inputs went on the engine's queue
        self.starved = 0.0  # engine-seconds the engine had waited for input until then
        self.taken = 0  # inputs fetchers have taken
        self.drained = drained  # called on the engine's loop when the last one is taken
        if expected == 0:
            self.done.set()

    def add(self, record: Record) -> None:
        self.records.append(record)
        if len(self.records) == self.expected:
            self.done.set()

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.done.set()


class _Engine:
    """An event loop on its own thread: one HTTP client, ``concurrency`` fetchers, a queue.

    The queue is a deque of inputs and a deque of idle fetchers, each waiting on
    a future: a shard's inputs go straight to the idle fetchers, the rest wait
    in FIFO order.  The engine keeps count of the time its fetchers spend idle
    for want of input: the capacity a worker loses while no shard's inputs are
    there to fetch (between shards, if the next one comes late).  Each shard is
    told how much had been lost since the previous shard arrived when its own
    inputs came, in engine-seconds (idle fetcher-seconds / ``concurrency``: 1.0
    is the whole engine idle for a second).  A fetcher counts as idle from the
    moment it finds no input until one is handed to it, not until its task next
    runs (with ``asyncio.Queue`` a woken getter is still "waiting" until the
    loop comes to it, which made a busy loop look starved).  The clock is read
    only when a fetcher finds nothing to do and when a shard arrives.
    """

    def __init__(self, opts: FetchOptions) -> None:
        self.opts = replace(opts, concurrency=fit_open_files(opts.concurrency))
        # What the crawl controls keep (the hosts' error budget...), for every
        # shard of the job this worker runs; never a sink here: the records
        # are the client's to write.
        kept = RunState(replace(self.opts, warc=None, output_dir=None, continue_at=None))
        self.state = kept if kept.needed else None
        self.active = 0  # shards running on it (guarded by the registry's lock)
        self.closing: asyncio.TimerHandle | None = None
        # On the loop's thread only: inputs not yet taken, idle fetchers, since when
        # the number idle last changed, and the idle fetcher-seconds since the last
        # shard arrived.  The first shard's wait is the engine's start, not a gap.
        self._inputs: deque[tuple[InputItem, _Shard]] = deque()
        self._idle: deque[asyncio.Future[tuple[InputItem, _Shard]]] = deque()
        self._idle_since = time.monotonic()
        self._idle_s = 0.0
        self._fed = False
        self._loop = new_event_loop()
        self._stop: asyncio.Future[None] | None = None
        self._started = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._main, name="surge-shard-engine", daemon=True)
        self._thread.start()
        if not self._started.wait(_THREAD_TIMEOUT_S):
            raise RuntimeError("surge's shard engine did not start")
        if self._failure:
            raise self._failure[0]

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # handed to the thread that waits for the start
            self._failure.append(error)
        finally:
            self._started.set()
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = self._loop.create_future()
        with relaxed_gc(self.opts.relax_gc):
            async with self.opts.client() as client:
                fetchers = [
                    asyncio.create_task(self._fetch(client)) for _ in range(self.opts.concurrency)
                ]
                self._started.set()
                try:
                    await self._stop
                finally:
                    for fetcher in fetchers:
                        fetcher.cancel()
                    await asyncio.gather(*fetchers, return_exceptions=True)

    async def _fetch(self, client: AsyncClient) -> None:
        inputs, idle = self._inputs, self._idle
        while True:
            if inputs:
                item, shard = inputs.popleft()
            else:
                self._count_idle()
                handed: asyncio.Future[tuple[InputItem, _Shard]] = self._loop.create_future()
                idle.append(handed)
                item, shard = await handed
            shard.taken += 1
            if shard.taken == shard.expected and shard.drained is not None:
                try:
                    shard.drained()
                except Exception:
                    # Only a notice (without it the client sends the next shard
                    # when this one ends): raised out of here, it would end this
                    # fetcher, one of ``concurrency``, for good, and the input it
                    # holds would never get a record, nor its shard an end.  The
                    # notice reaches into Dask's worker (``log_event``), whose
                    # state is not ours to vouch for while it closes.
                    log.warning(
                        "telling the client a shard's inputs are all taken failed", exc_info=True
                    )
            if shard.error is not None:
                continue  # the shard failed already: its other inputs are moot
            try:
                record = await fetch_one(client, item, self.opts, self.state)
            except Exception as error:  # a bug, not a remote failure: fail the shard
                shard.fail(error)
            else:
                shard.add(record)

    def _count_idle(self) -> None:
        """Add the idle fetcher-seconds up to now (before the number idle changes)."""
        now = time.monotonic()
        self._idle_s += len(self._idle) * (now - self._idle_since)
        self._idle_since = now

    def _enqueue(self, items: Sequence[InputItem], shard: _Shard) -> None:
        self._count_idle()
        if self._fed:
            shard.starved = self._idle_s / self.opts.concurrency
        self._fed = True
        self._idle_s = 0.0
        shard.queued = time.time()
        queued = iter(items)
        idle = self._idle
        while idle:
            handed = idle.popleft()
            if handed.done():  # its fetcher was cancelled: the engine is stopping
                continue
            item = next(queued, None)
            if item is None:
                idle.appendleft(handed)
                return
            handed.set_result((item, shard))
        self._inputs.extend((item, shard) for item in queued)

    def put(self, items: Sequence[InputItem], shard: _Shard) -> None:
        """Queue ``items`` for ``shard`` (from any thread): their records go to it."""
        self._loop.call_soon_threadsafe(self._enqueue, items, shard)

    def wait(
        self, shard: _Shard, given_up: Callable[[], Exception | None] | None = None
    ) -> list[Record]:
        """``shard``'s records, in completion order, once all are in (from a task's thread).

        ``given_up`` is asked every :data:`CANCEL_POLL_S`; once it returns an
        error, the shard's queued inputs are dropped and that error is raised.
        """
        while not shard.done.wait(CANCEL_POLL_S if given_up is not None else None):
            if given_up is not None and (error := given_up()) is not None:
                shard.fail(error)
        if shard.error is not None:
            raise shard.error
        return shard.records

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Run ``callback(*args)`` on the engine's loop (from any thread)."""
        self._loop.call_soon_threadsafe(callback, *args)

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """On the engine's loop only: run ``callback`` ``delay`` seconds from now."""
        return self._loop.call_later(delay, callback)

    def stop(self) -> None:
        """End the loop (from any thread); the fetchers are cancelled, connections closed."""

        def set_stop() -> None:
            if self._stop is not None and not self._stop.done():
                self._stop.set_result(None)

        self._loop.call_soon_threadsafe(set_stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(_THREAD_TIMEOUT_S)


# -- one engine per job and process --------------------------------------------------------

_lock = threading.Lock()
_engines: dict[str, _Engine] = {}


def _acquire(job: str, opts: FetchOptions) -> _Engine:
    with _lock:
        engine = _engines.get(job)
        if engine is None:
            engine = _engines[job] = _Engine(opts)
        engine.active += 1
        if engine.closing is not None:
            engine.call_soon(engine.closing.cancel)
            engine.closing = None
        return engine


def _release(job: str, engine: _Engine) -> None:
    with _lock:
        engine.active -= 1
        if engine.active == 0:
            engine.call_soon(_linger, job, engine)


def _linger(job: str, engine: _Engine) -> None:
    # On the engine's loop: close it LINGER_S from now unless a shard comes first.
    with _lock:
        if engine.active == 0 and engine.closing is None and _engines.get(job) is engine:
            engine.closing = engine.call_later(LINGER_S, lambda: _close_if_idle(job, engine))


def _close_if_idle(job: str, engine: _Engine) -> None:
    with _lock:
        if engine.active != 0 or _engines.get(job) is not engine:
            return
        del _engines[job]
    engine.stop()

"""A bulk job on a Dask cluster: the input cut into shards, one task each, records merged.

    from dask.distributed import Client
    import surge

    with Client("tcp://scheduler:8786") as client:
        for record in surge.fetch_on_cluster(client, urls, concurrency=1000):
            ...

The client reads the input as a stream and cuts it into shards of
``shard_size`` inputs.  Each shard is one Dask task, run by
:func:`surge.bulk.shards.run_shard` on a worker's own engine and event loop;
the options (``concurrency`` included) apply per worker process.  One task per
shard of thousands, not one per URL: the scheduler spends about a millisecond
per task, and a ``client.map`` over 3.1M items overwhelmed it
(dask/distributed #2181).

- Prefetch: each worker's engine has one shard whose inputs it is taking and
  one queued behind (:data:`SHARDS_PER_WORKER`).  A shard's task leaves Dask's
  thread pool once its inputs are queued (``secede``), so the next one starts
  and queues its inputs however many threads the worker has; and when the
  engine has taken a shard's last input it says so (a Dask event), and the
  next shard is sent then -- not when the shard finishes, which its slowest
  host can put off by up to ``max_time``.  So the engine does not wait for
  input while the client hears of a shard and sends the next (the engine
  measures it: :attr:`ShardResult.starved`).
- Backpressure: at most :data:`MAX_SHARDS_PER_WORKER` shards per worker,
  stragglers included, and at most ``max_in_flight`` in all if given, are
  submitted and not yet merged, so this process holds a bounded number of
  shards whatever the input's size.
- Inputs out: a shard's inputs are packed into one ``bytes`` value
  (:func:`~surge.bulk.shards.pack_inputs`) and scattered to the worker whose
  engine has the fewest shards queued, where its task is then pinned (loosely),
  rather than passed as the task's argument.  An argument travels in the
  scheduler's "compute-task" message, and Dask's batched streams keep their
  last 1,000 messages under 1 MB (``distributed.admin.low-level-log-length``):
  the scheduler kept every recent shard (~1.8 MB each) and grew with the input.
  Scattered data goes by RPC, which keeps nothing, and is dropped with the
  task.
- One writer: records come back here, a shard's all at once, as each shard
  finishes; the caller writes them.  A shard's records are handed out once,
  when its current task first completes: a shard whose worker died (its
  inputs died with it) or is being retired
  (:class:`~surge.bulk.shards.WorkerClosing`) is resubmitted here, up to
  :data:`MAX_SHARD_ATTEMPTS` times, and a stale completion is ignored.
- Stopping: setting ``stop`` (a :class:`threading.Event`) or closing the
  iterator cancels the shards in flight; the shards already handed out are
  the caller's to keep, and ``--resume`` (input line numbers) carries on.
- A bad input line stops the reading there: the inputs before it still run,
  the shards in flight are merged, then the error is raised.

``dask.distributed`` is imported only here, and only when a cluster is used:
without it, :func:`import_distributed` raises a :class:`UsageError` naming the
extra to install.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from surge.bulk.engine import FetchOptions, Record, as_items
from surge.bulk.inputs import InputItem
from surge.bulk.shards import DRAINED_TOPIC, ShardOutcome, WorkerClosing, pack_inputs, run_shard
from surge.bulk.summary import Summary
from surge.errors import UsageError
from surge.extras import missing

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster

#: Inputs per shard (one Dask task): at 1,000 in flight and ~100 ms a host, a
#: few seconds of work, so the scheduler's ~1 ms per task is well under 1%.
DEFAULT_SHARD_SIZE = 10_000
#: Shards per worker whose inputs its engine has not all taken yet: one being
#: taken, one queued behind it, so the engine has the next shard's inputs when
#: the current one's run out.  A shard whose inputs are all taken (only its
#: stragglers left) no longer counts: the next one is sent then.
SHARDS_PER_WORKER = 2
#: ... and in all, stragglers included (each holds its inputs here and its
#: records on the worker until its last host answers or times out).
MAX_SHARDS_PER_WORKER = 6
#: How many times a shard is submitted before its failure stops the job.
MAX_SHARD_ATTEMPTS = 3
#: How often a wait for the next shard looks at ``stop``.
_STOP_POLL_S = 0.25
#: The options a cluster run does not take (yet): the FetchOptions field, its
#: flags, and why.  The one list both front ends check (refuse_on_a_cluster).
NOT_ON_A_CLUSTER: Final = (
    # The timings live in the workers' processes; shards return records.
    ("trace", "--trace and --har"),
    # One jar in many processes: nobody's to write back.
    ("cookies", "-b FILE and --cookie-jar"),
    # A host's window kept by each worker would not bound the host.
    ("auto_throttle", "--auto-throttle"),
    # One WARC written by many processes, bodies on many machines, a host's
    # pace kept by each: none of it means what it says yet.
    ("warc", "--warc"),
    ("output_dir", "--output-dir"),
    ("rate_per_host", "--rate-per-host"),
)
#: How many workers sending a shard's inputs tries, while workers come and go.
_SCATTER_TRIES = 5
#: Seconds to wait for one scatter.  The scheduler holds a scatter to a worker
#: that is not running (paused, retiring) until it runs again or the client's
#: timeout (30 s) passes; meanwhile the job writes nothing and does not stop.
_SCATTER_TIMEOUT_S = 10.0
_LOCAL = re.compile(r"local:(\d+)\Z")
#: A ``LocalCluster`` on loopback without a dashboard.  Dask's scheduler serves
#: HTTP (health, metrics) even with the dashboard off, on :8787 unless told
#: otherwise, and warns "Port 8787 is already in use" on stderr when another
#: cluster has it: a port of the system's choosing, on 127.0.0.1, avoids both.
LOCAL_CLUSTER_OPTIONS: dict[str, Any] = {
    "host": "127.0.0.1",
    "dashboard_address": "127.0.0.1:0",
    "scheduler_kwargs": {"dashboard": False},
}
#: Dask's configuration for a ``LocalCluster`` it starts: the values Dask's own
#: cluster tests use (``distributed.utils_test.config_for_cluster_tests``) for
#: the periodic work every worker, nanny and scheduler does whether or not a task
#: runs.  By default a worker samples its task threads' stacks every 10 ms for a
#: profile no one looks at (local:N serves no dashboard), every server measures
#: its event loop every 20 ms, and every worker and nanny polls the worker's
#: memory every 100 ms.  Measured on the 2-core development machine, ``local:2``
#: doing nothing for 20 s (``benchmarks/cluster.py --only idle``, two runs): each
#: worker used 3.5-3.9 % of a core and the client process (the scheduler and the
#: nannies) 4.3-6.5 %, 11.6-14.2 % of a core in all; with these, 0.49-0.57 % and
#: 1.3-1.5 %, 2.3-2.6 % in all.  On a machine whose cores the workers already
#: fill, that is CPU the fetching gets back.  A stalled loop is still reported
#: (Dask warns after 3 s whatever the interval) and the memory limits still act,
#: within half a second.  An existing cluster keeps its own configuration
#: (docs/cluster.md says what to set on its workers).
LOCAL_CLUSTER_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.worker.memory.monitor-interval": "500ms",
}


def local_cluster(workers: int, threads_per_worker: int = 2, **options: Any) -> LocalCluster:
    """A started ``LocalCluster`` of ``workers`` processes, as ``--cluster local:N`` makes one.

    On 127.0.0.1 (:data:`LOCAL_CLUSTER_OPTIONS`), configured with
    :data:`LOCAL_CLUSTER_CONFIG` for this cluster: the configuration is set
    process-wide while the cluster starts (a few seconds: a Dask server created
    by another thread then would see it too), not after.  The scheduler reads
    it while it starts, and each nanny is given a
    whole copy to start its worker with, each time it does.  (A nanny keeps
    ``toolz.merge`` of the global configuration, a shallow copy: a worker it
    restarted after a crash, with the setting made only while the cluster
    started, came back with Dask's defaults.)  ``options`` go to ``LocalCluster``.
    """
    distributed = import_distributed()
    import dask.config

    with dask.config.set(LOCAL_CLUSTER_CONFIG):
        config = dask.config.merge(dask.config.config)  # a deep copy, this one
        cluster: LocalCluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            config=config,
            **LOCAL_CLUSTER_OPTIONS,
            **options,
        )
    return cluster


def import_distributed() -> ModuleType:
    """``distributed``, or a UsageError saying how to install it."""
    try:
        import distributed
    except ModuleNotFoundError as error:
        raise UsageError(str(missing(error, "--cluster (Dask's distributed scheduler)"))) from None
    return distributed


@contextlib.contextmanager
def connect(address: str, *, threads_per_worker: int = 2) -> Iterator[Client]:
    """A Dask client for ``address``: ``local:N`` or a scheduler address.

    ``local:N`` starts a ``LocalCluster`` of N worker processes on 127.0.0.1 (no
    dashboard, less of Dask's periodic work: :func:`local_cluster`) and closes it
    on exit; its workers ignore SIGINT, so a Ctrl-C at
    a terminal, which reaches the whole process group, stops the job through
    this process rather than killing workers under it.  Any other address
    (``tcp://host:8786``) is an existing scheduler, which is left running.
    """
    distributed = import_distributed()
    local = _LOCAL.match(address.strip())
    if local is None and address.strip().startswith("local"):
        raise UsageError(f"--cluster {address!r}: expected local:N (N worker processes)")
    if local is not None:
        workers = int(local.group(1))
        if workers < 1:
            raise UsageError(f"--cluster {address!r}: at least one worker")
        interrupt = signal.getsignal(signal.SIGINT)
        with contextlib.suppress(ValueError):  # not the main thread: leave it
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by spawned workers
        try:
            cluster = local_cluster(workers, threads_per_worker, silence_logs=logging.ERROR)
        finally:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGINT, interrupt)
        with cluster, distributed.Client(cluster) as client:
            yield client
        return
    try:
        # Waits up to Dask's connect timeout (distributed.comm.timeouts.connect, 30 s).
        client = distributed.Client(address)
    except (OSError, TimeoutError, ValueError) as error:
        raise UsageError(f"--cluster {address!r}: cannot reach the scheduler ({error})") from None
    # Dask logs at INFO, with tracebacks, what a lost connection does to its comms;
    # the job says it in one line.  Warnings (mismatched versions...) still show.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    with client:
        try:
            yield client
        finally:
            if client.status not in ("running", "closed"):
                # The scheduler went away: closing cancels Dask's attempts to
                # reconnect, which it logs as an error with a traceback, on top
                # of the one line the job has already said.
                for name in ("distributed", "distributed.client", "distributed.utils"):
                    logging.getLogger(name).setLevel(logging.CRITICAL + 1)


class ShardFailed(RuntimeError):
    """A shard failed :data:`MAX_SHARD_ATTEMPTS` times: the job cannot complete."""


class SchedulerLost(RuntimeError):
    """The connection to the Dask scheduler was lost: the job cannot complete."""


@dataclass
class ShardResult:
    """One shard's records, as merged by :func:`run_shards`, and how it went."""

    shard: int  # 0, 1, 2... in input order
    first_line: int
    last_line: int
    records: list[Record]
    attempts: int  # tasks submitted for it (1 unless its worker died, say)
    submitted: float  # time.time() here when its (last) task's inputs were sent
    received: float  # ... and when its records arrived here
    started: float  # time.time() on the worker when the task began
    finished: float  # ... and when its last record was done
    worker: str  # "host:pid"
    concurrency: int  # what the worker's engine ran with
    notified: float  # time.time() here when Dask said the task was done
    taken: float  # ... and when this iterator came to it (later if the caller was busy)
    encoded: str | None = None  # with ``encode``: the records, formatted (``records`` empty)
    summary: Summary | None = None  # ... and what they hold
    queued: float = 0.0  # time.time() on the worker when its inputs reached the engine
    starved: float = 0.0  # engine-seconds its engine had waited for input until then


@dataclass
class _InFlight:
    packed: bytes  # its inputs, as sent (kept to send them again)
    first_line: int
    last_line: int
    future: Future[ShardOutcome]
    attempts: int
    submitted: float
    worker: str | None  # the worker its inputs were scattered to
    drained: bool = False  # its engine has taken all its inputs: only stragglers are left


#: What a job hears of its shards: (shard, attempt, its task's future when the
#: task is done / None when its inputs are all taken, time.time() then).
_ShardEvent = tuple[int, int, "Future[ShardOutcome] | None", float]


def _shard_key(job: str, shard: int, attempt: int) -> str:
    """The Dask key of ``job``'s task for ``shard``, ``attempt``: what its drained event says."""
    return f"surge-shard-{job}-{shard}-{attempt}"


class _DrainedEvents:
    """One Dask client's drained events (:data:`DRAINED_TOPIC`), routed to its jobs.

    The client subscribes to the topic once, with this as the handler, and keeps
    it: ``Client.unsubscribe_topic`` tells the scheduler but leaves the handler
    in the client's ``_event_handlers`` (distributed 2026.8), and the scheduler
    keeps every topic it has seen, with up to 1,000 events; a topic per job left
    both behind at every job.  Dask subscribes every client to its own "print"
    and "warn" topics the same way, for the client's life (the scheduler then
    keeps a departed client's name among a topic's subscribers, as for those
    two: a name, no events).  The handler runs on the Dask client's loop
    thread, the jobs on their callers' threads: hence the lock.  Events of a
    job not running here (finished, or another client's: every subscriber
    hears every event) are dropped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, queue.SimpleQueue[_ShardEvent]] = {}

    def add(self, job: str, events: queue.SimpleQueue[_ShardEvent]) -> None:
        with self._lock:
            self._jobs[job] = events

    def remove(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)

    def jobs(self) -> list[str]:
        """The jobs whose events are routed now."""
        with self._lock:
            return list(self._jobs)

    def __call__(self, event: tuple[float, Any]) -> None:
        # On the Dask client's loop: a worker's engine took a shard's last input.
        key = event[1]
        try:
            prefix, job, shard, attempt = key.rsplit("-", 3)
            heard = (int(shard), int(attempt), None, time.time())
        except (AttributeError, ValueError):
            return  # not a surge shard's key
        if prefix != "surge-shard":
            return
        with self._lock:
            events = self._jobs.get(job)
        if events is not None:
            events.put(heard)


#: Each Dask client's router; dropped with the client (the router does not refer
#: to it, so it does not keep it alive).
_drained_events: weakref.WeakKeyDictionary[Client, _DrainedEvents] = weakref.WeakKeyDictionary()
_drained_events_lock = threading.Lock()


def _subscribed(client: Client) -> _DrainedEvents:
    """``client``'s router of drained events, subscribed to the topic for a job.

    One router per client, but the subscription is sent again at every job
    (the same handler under the same topic: nothing more is kept, here or on
    the scheduler): a client that reconnects to a restarted scheduler does
    not subscribe its topics there again, and a router subscribed only once
    heard nothing after that, so every later job's engines waited for input
    between shards.
    """
    with _drained_events_lock:
        router = _drained_events.get(client)
        if router is None:
            router = _drained_events[client] = _DrainedEvents()
        client.subscribe_topic(DRAINED_TOPIC, router)  # type: ignore[no-untyped-call]
        return router


def refuse_on_a_cluster(opts: FetchOptions, **given: object) -> None:
    """A UsageError naming the first option of :data:`NOT_ON_A_CLUSTER` that is
    set: in ``opts``, or in ``given`` (a field's value the caller holds apart,
    as the command line's --trace path)."""
    for field, flags in NOT_ON_A_CLUSTER:
        value = given[field] if field in given else getattr(opts, field)
        if value is not None and value is not False and value != "":
            verb = "are" if " and " in flags else "is"
            raise UsageError(f"{flags} ({field}=) {verb} not available with --cluster yet")


def rate_share(rate: float, workers: int) -> float:
    """A worker's share of a run's ``--rate``: each worker process runs one
    engine for every shard of the job it is given, paced at ``rate / workers``
    (the workers running when the job starts; at least one), so the cluster
    together starts at most ``rate`` requests a second.  A worker that joins
    later paces at the same share, and adds it."""
    return rate / max(1, workers)


def run_shards(
    client: Client,
    items: Iterable[InputItem],
    opts: FetchOptions,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    max_in_flight: int | None = None,
    stop: threading.Event | None = None,
    encode: str | None = None,
) -> Iterator[ShardResult]:
    """Run ``items`` on ``client``'s cluster in shards; yield each shard as it returns.

    With ``encode`` (an output format: ``jsonl``, ``csv``) a shard's records come
    back formatted, as :class:`~surge.bulk.outputs.RecordWriter` would write them
    (``encoded``, for :meth:`~surge.bulk.outputs.RecordWriter.write_encoded`),
    with their :class:`~surge.bulk.summary.Summary`; ``records`` is then empty.

    Once ``stop`` is set, the shards in flight are cancelled and the iteration
    ends (checked every 0.25 s while waiting, and between shards).
    """
    distributed = import_distributed()
    if shard_size < 1:
        raise UsageError(f"shard size must be at least 1, not {shard_size}")
    refuse_on_a_cluster(opts)
    if max_in_flight is not None and max_in_flight < 1:
        raise UsageError(f"shards in flight must be at least 1, not {max_in_flight}")
    job = uuid.uuid4().hex[:12]
    source = iter(items)
    events: queue.SimpleQueue[_ShardEvent] = queue.SimpleQueue()
    in_flight: dict[int, _InFlight] = {}
    next_shard = 0
    exhausted = False
    failure: list[Exception] = []
    # The running workers, asked of the scheduler once per fill(), and again when
    # sending to a worker fails: one round trip fewer per shard.  Not a paused or
    # retiring one: the scheduler scatters nothing to those (it waits for one to
    # run again, 30 s at the client's default timeout, then fails), and a
    # retiring one's shards are on their way elsewhere.
    workers: list[str] = []

    def ask_workers() -> None:
        # Client.nthreads() without those (the scheduler's own filter, as
        # Client.scatter(direct=True) uses it).
        workers[:] = client.sync(client.scheduler.ncores_running)  # type: ignore[union-attr,no-untyped-call]

    if opts.rate is not None:
        # --rate holds for the cluster: each worker's engine paces its shards
        # at an equal share of it (see rate_share).
        ask_workers()
        opts = replace(opts, rate=rate_share(opts.rate, len(workers)))

    def submit(
        shard: int, packed: bytes, first: int, last: int, attempts: int, since: float
    ) -> None:
        # ``since``: when the inputs began to be packed (the shard's ``submitted``)
        worker, inputs = send_inputs(f"surge-inputs-{job}-{shard}-{attempts}", packed)
        where = {"workers": [worker], "allow_other_workers": True} if worker is not None else {}
        future = client.submit(
            run_shard,
            job,
            inputs,
            opts,
            encode,
            key=_shard_key(job, shard, attempts),
            pure=False,
            **where,
        )
        in_flight[shard] = _InFlight(packed, first, last, future, attempts, since, worker)
        future.add_done_callback(  # type: ignore[no-untyped-call]
            lambda done: events.put((shard, attempts, done, time.time()))
        )

    def send_inputs(key: str, packed: bytes) -> tuple[str | None, bytes | Future[Any]]:
        # Scattered (see "Inputs out" above) to the hungriest worker.  One that
        # just died may still be listed: sending to it fails (OSError; KeyError
        # from a scheduler that has just removed it), and the choice is made
        # again.  With no worker at all (yet: an adaptive cluster starts its
        # workers when tasks are pending), the inputs go with the task, as its
        # argument, which the scheduler then keeps for a while (a few shards).
        for _ in range(_SCATTER_TRIES):
            worker = hungriest() or hungriest(anywhere=True)
            if worker is None or stopping():
                break
            try:
                futures = client.scatter(  # type: ignore[no-untyped-call]
                    {key: packed}, workers=[worker], hash=False, timeout=_SCATTER_TIMEOUT_S
                )
            except (OSError, KeyError):  # TimeoutError included
                time.sleep(_STOP_POLL_S)
                ask_workers()
                continue
            return worker, futures[key]
        return None, packed

    def hungriest(anywhere: bool = False) -> str | None:
        # The worker whose engine has the fewest shards with inputs left to take,
        # if one has fewer than SHARDS_PER_WORKER (and fewer than
        # MAX_SHARDS_PER_WORKER in all), or ``anywhere``, the least loaded (a
        # shard sent again after a failure).  A shard runs where its inputs are,
        # so the choice of where to scatter them is the scheduling decision.
        queued = dict.fromkeys(workers, 0)
        total = dict.fromkeys(workers, 0)
        for entry in in_flight.values():
            if entry.worker in total:
                total[entry.worker] += 1
                queued[entry.worker] += not entry.drained
        room = [
            w
            for w in workers
            if anywhere or (queued[w] < SHARDS_PER_WORKER and total[w] < MAX_SHARDS_PER_WORKER)
        ]
        return min(room, key=lambda w: (queued[w], total[w]), default=None)

    def fill() -> None:
        nonlocal next_shard, exhausted
        if exhausted:
            return  # nothing to send: no round trip to ask for the workers
        ask_workers()
        while not exhausted and not stopping():
            if max_in_flight is not None and len(in_flight) >= max_in_flight:
                break
            # A hard cap whatever hungriest() says: a shard whose scatter failed
            # counts against no worker, so a listed worker that refuses every
            # scatter (paused, retiring) would otherwise draw the whole input.
            if len(in_flight) >= MAX_SHARDS_PER_WORKER * max(1, len(workers)):
                break
            if hungriest() is None and (workers or in_flight):
                break  # every worker has its next shard queued (or no worker: one shard)
            batch: list[InputItem] = []
            try:
                batch.extend(islice(source, shard_size))
            except Exception as error:  # a bad input line: what came before it still runs
                failure.append(error)
                exhausted = True
            if len(batch) < shard_size:
                exhausted = True
            if batch:
                since = time.time()
                packed = pack_inputs(batch)
                submit(next_shard, packed, batch[0].line, batch[-1].line, 1, since)
                next_shard += 1

    def stopping() -> bool:
        return stop is not None and stop.is_set()

    drained = _subscribed(client)
    drained.add(job, events)
    try:
        fill()
        while in_flight and not stopping():
            try:
                shard, attempt, future, notified = events.get(timeout=_STOP_POLL_S)
            except queue.Empty:
                continue
            taken = time.time()
            entry = in_flight.get(shard)
            if entry is None or entry.attempts != attempt:
                continue  # a superseded attempt: that shard is merged once, elsewhere
            if future is None:  # drained: its worker's engine wants the next shard
                entry.drained = True
                fill()
                continue
            try:
                outcome: ShardOutcome = future.result()
            except (distributed.KilledWorker, distributed.CancelledError, WorkerClosing) as error:
                if client.status != "running":
                    # Dask cancels every future when it loses the scheduler (and
                    # tries to reconnect): the scheduler's state, tasks included,
                    # is gone either way.
                    raise SchedulerLost(_lost(client, error)) from None
                # Its worker died (the scattered inputs with it: the task is
                # cancelled for its lost dependency), Dask gave up on it
                # (allowed-failures), a cluster restart cancelled it, or its
                # worker is closing (retired, shut down) and the task gave the
                # shard up.  (The job's own stop cancels its tasks after this
                # loop: their ShardCancelled comes back to nobody.)
                if entry.attempts >= MAX_SHARD_ATTEMPTS:
                    raise ShardFailed(
                        f"the shard of input lines {entry.first_line}-{entry.last_line} "
                        f"failed {entry.attempts} times; last: {error}"
                    ) from error
                first, last, again = entry.first_line, entry.last_line, entry.attempts + 1
                # The workers as they are now: the one that lost the shard may be
                # listed still, and look hungriest (its other shards only have
                # stragglers left), but a retiring one is no longer running.
                ask_workers()
                submit(shard, entry.packed, first, last, again, time.time())
                continue
            received = time.time()
            del in_flight[shard]
            # The next shard goes out before this one is handed over: the worker
            # it freed need not wait while the caller writes its records.
            fill()
            yield ShardResult(
                shard,
                entry.first_line,
                entry.last_line,
                outcome.records,
                entry.attempts,
                entry.submitted,
                received,
                outcome.started,
                outcome.finished,
                outcome.worker,
                outcome.concurrency,
                notified,
                taken,
                outcome.encoded,
                outcome.summary,
                outcome.queued,
                outcome.starved,
            )
    except OSError as error:  # a call to the scheduler failed: connect timeout, comm closed
        raise SchedulerLost(_lost(client, error)) from None
    finally:
        drained.remove(job)
        if client.status == "running" and in_flight:
            with contextlib.suppress(OSError):
                client.cancel([e.future for e in in_flight.values()])  # type: ignore[no-untyped-call]
    if failure and not stopping():
        raise failure[0]


def _lost(client: Client, error: BaseException) -> str:
    address = getattr(client.scheduler, "address", None) or "?"
    message = f"lost the connection to the Dask scheduler {address}"
    if isinstance(error, OSError):  # Dask's cancellation says no more than that
        message += f" ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
    return message


def fetch_on_cluster(
    client: Client,
    urls: Iterable[str | InputItem],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    max_in_flight: int | None = None,
    **options: Any,
) -> Iterator[Record]:
    """``surge.fetch_all`` on a Dask cluster: one record per input, streamed back.

    ``client`` is a synchronous ``dask.distributed.Client``; ``urls`` any
    iterable of URL strings or :class:`InputItem` (read lazily, a shard at a
    time).  Options as :class:`~surge.bulk.engine.FetchOptions`, applied per
    worker process.  Records arrive a shard at a time, in the order shards
    finish.  Closing the iterator early cancels the shards in flight.
    """
    opts = FetchOptions(**options)
    for shard in run_shards(
        client, as_items(urls), opts, shard_size=shard_size, max_in_flight=max_in_flight
    ):
        yield from shard.records

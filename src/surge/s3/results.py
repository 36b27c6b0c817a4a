"""A run's results as an async iterator: what ``surge.s3.remove_results``,
``copy_results`` and ``move_results`` give, one :class:`Result` as each
object is done, instead of a callback and a summary at the end.

The run goes on in its own task; it waits (``TransferOptions.room``) while
:data:`WAITING` results are not taken yet, so a slow consumer holds memory
to that many results (and what the requests in flight then finish), never
a listing's worth.  Its error, if it fails, is raised after the last result;
leaving the loop early cancels it (its cleanup runs: uploads aborted, the
deletes in flight told).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, TypeVar

from surge.s3.transfer import Result, Summary, TransferOptions

#: Results not yet taken at most before the run waits.
WAITING = 1000

Opts = TypeVar("Opts", bound=TransferOptions)


async def results(
    start: Callable[[Opts], Coroutine[Any, Any, Summary]], opts: Opts
) -> AsyncGenerator[Result, None]:
    """The results of ``start(options)``: ``opts`` with its ``on_result``
    (still told) and ``room`` made this iterator's."""
    queue: asyncio.Queue[Result | None] = asyncio.Queue()
    taken = asyncio.Event()
    told = opts.on_result

    def on_result(result: Result) -> None:
        if told is not None:
            told(result)
        queue.put_nowait(result)

    async def room() -> None:
        while queue.qsize() >= WAITING:
            taken.clear()
            await taken.wait()

    run = asyncio.ensure_future(start(dataclasses.replace(opts, on_result=on_result, room=room)))
    run.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (result := await queue.get()) is not None:
            taken.set()
            yield result
        run.result()  # its error, if it failed
    finally:
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

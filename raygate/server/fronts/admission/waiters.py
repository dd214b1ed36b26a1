"""Who waits for a change of which admission status (long-polls, gRPC Watches), and how
they are woken: a batch per loop turn, so a thousand waiters never stall a request."""

from __future__ import annotations

import asyncio

WAKE_BATCH = 8
"""Waiters woken per turn of the event loop when a status changes. A change watched by
thousands wakes them a batch at a time, with the loop's I/O polled between batches, so a
scheduler request that arrives meanwhile waits for one batch (a Watch send costs some
50-150 µs of Python: about a millisecond), not for all of them."""


class Signal:
    """The waiters of one scope (a cluster, a namespace, everything). A waiter ``arm``s a
    future before it reads the state, so that a change after the read wakes it; it
    ``disarm``s the future when done. ``fire`` wakes every armed waiter."""

    __slots__ = ("batch", "waiters")

    def __init__(self, batch: int = WAKE_BATCH) -> None:
        self.batch = batch
        self.waiters: dict[asyncio.Future[None], None] = {}  # an ordered set

    def arm(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters[future] = None
        return future

    def disarm(self, future: asyncio.Future[None]) -> None:
        self.waiters.pop(future, None)

    def fire(self) -> None:
        if self.waiters:
            futures, self.waiters = list(self.waiters), {}
            wake(futures, 0, self.batch)


def wake(futures: list[asyncio.Future[None]], start: int, batch: int) -> None:
    for future in futures[start:start + batch]:
        if not future.done():
            future.set_result(None)
    if start + batch < len(futures):
        # The rest on a later turn of the loop, after the I/O that arrived meanwhile.
        asyncio.get_running_loop().call_soon(wake, futures, start + batch, batch)

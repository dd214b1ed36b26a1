"""The authorizer's memory: answers kept for a while, in bounded LRU maps, denials for
half as long and apart from the grants."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from raygate.server.cache.memo import Memo

K = TypeVar("K", bound=Hashable)


V = TypeVar("V")


class ExpiringMap(Generic[K, V]):
    """A bounded LRU map whose entries expire. Used on the event loop only: no lock."""

    def __init__(self, max_entries: int) -> None:
        self._entries: Memo[K, tuple[float, V]] = Memo(max_entries)

    def get(self, key: K, now: float) -> tuple[bool, V | None]:
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[0] <= now:
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)  # used: the newest, the last to go
        return True, entry[1]

    def put(self, key: K, value: V, ttl: float, now: float) -> None:
        if ttl <= 0:
            return
        self._entries.put(key, (now + ttl, value))


class Answers(Generic[K, V]):
    """Review answers by key: positive and negative ones in separate bounded maps, so
    that a flood of rejected tokens (or refused asks) evicts only its own kind."""

    def __init__(self, max_entries: int, max_negative: int) -> None:
        self.positive: ExpiringMap[K, V] = ExpiringMap(max_entries)
        self.negative: ExpiringMap[K, V] = ExpiringMap(max_negative)

    def get(self, key: K, now: float) -> tuple[bool, V | None]:
        found = self.positive.get(key, now)
        return found if found[0] else self.negative.get(key, now)

    def put(self, key: K, value: V, positive: bool, ttl: float, now: float) -> None:
        # A key is reviewed only when neither map holds it: no stale twin to drop.
        (self.positive if positive else self.negative).put(key, value, ttl, now)

"""The one bounded memo of the server: what is worth keeping, up to a limit."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

__all__ = ["Memo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(OrderedDict[K, V]):
    """A map of at most ``limit`` entries: a put beyond it drops the oldest entry (put
    order; ``move_to_end`` on a hit makes it use order). An ``OrderedDict`` drops its
    first entry in O(1), where a dict's first live entry is found past the holes its
    deletions left. Threads may share one (the pod views' memos): every step is one call,
    so two puts racing at worst drop one entry too many."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` under ``key`` as the newest entry; returns ``value``."""
        self.pop(key, None)  # a put again is the newest
        if len(self) >= self.limit:
            self.popitem(last=False)
        self[key] = value
        return value

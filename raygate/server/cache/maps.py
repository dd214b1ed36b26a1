"""The persistent maps behind every index, and the editors that stage their changes
(``immutables.Map`` copies only the path to what changed)."""

from __future__ import annotations

import weakref
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from immutables import Map

if TYPE_CHECKING:
    from immutables._protocols import MapMutation



V = TypeVar("V")
KT = TypeVar("KT")
MT = TypeVar("MT")
VT = TypeVar("VT")
Entry: TypeAlias = tuple[str, V]
"""(resourceVersion, view): the version lets a re-list keep the views it already has."""


_EMPTY: Map[Any, Any] = Map()


class _Values:
    """``tuple(inner.values())`` for the inner maps of the indexes, built once per map.

    An index entry that no edit touched is the very same map in the next snapshot, so
    its tuple is built on the first read and every later reader, in this snapshot or the
    next ones, gets the same tuple object (callers that compare what they read between
    snapshots see identity, a pointer check). Entries go when their map does."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[weakref.ref[Map[Any, Any]], tuple[Any, ...]]] = {}

    def __call__(self, inner: Map[Any, V] | None) -> tuple[V, ...]:
        if inner is None:
            return ()
        key = id(inner)
        hit = self._memo.get(key)
        if hit is not None and hit[0]() is inner:
            return hit[1]
        values = tuple(inner.values())
        self._memo[key] = (weakref.ref(inner, partial(self._forget, key)), values)
        return values

    def _forget(self, key: int, ref: weakref.ref[Map[Any, Any]]) -> None:
        hit = self._memo.get(key)
        if hit is not None and hit[0] is ref:
            self._memo.pop(key, None)


_values = _Values()


class _Flat(Generic[KT, VT]):
    """A map being edited. Its first write makes a new persistent map (``Map.set``,
    O(log n) copied nodes); from the second on, writes go to one in-place mutation, which
    costs more to open but less per write. Untouched maps cost nothing."""

    __slots__ = ("map", "mut", "touched", "written")

    def __init__(self, base: Map[KT, VT], *, track: bool = False) -> None:
        self.map = base
        self.mut: MapMutation[KT, VT] | None = None
        self.written = False
        self.touched: set[KT] | None = set() if track else None
        """With ``track``: every key written or removed."""

    def get(self, key: KT, default: VT | None = None) -> VT | None:
        mut = self.mut
        return mut.get(key, default) if mut is not None else self.map.get(key, default)

    def __contains__(self, key: object) -> bool:
        mut = self.mut
        return key in mut if mut is not None else key in self.map

    def __len__(self) -> int:
        mut = self.mut
        return len(mut) if mut is not None else len(self.map)

    def set(self, key: KT, value: VT) -> None:
        if self.touched is not None:
            self.touched.add(key)
        mut = self.mut
        if mut is not None:
            mut[key] = value
        elif self.written:
            mut = self.mut = self.map.mutate()
            mut[key] = value
        else:
            self.map, self.written = self.map.set(key, value), True

    def pop(self, key: KT) -> VT | None:
        value = self.get(key)
        if value is None:
            return None
        if self.touched is not None:
            self.touched.add(key)
        mut = self.mut
        if mut is not None:
            del mut[key]
        elif self.written:
            mut = self.mut = self.map.mutate()
            del mut[key]
        else:
            self.map, self.written = self.map.delete(key), True
        return value

    def finish(self) -> Map[KT, VT]:
        """The edited map; the editor stays usable (the next write opens a mutation)."""
        if self.mut is not None:
            self.map, self.mut = self.mut.finish(), None
        return self.map


class _Nested(Generic[KT, MT, VT]):
    """An index of maps (key -> member -> view) being edited: each inner map the edit
    touches is edited once and put back by ``finish``; emptied ones are removed."""

    __slots__ = ("inner", "outer", "touched")

    def __init__(self, base: Map[KT, Map[MT, VT]]) -> None:
        self.outer = _Flat(base)
        self.inner: dict[KT, _Flat[MT, VT]] = {}
        self.touched: set[KT] = set()
        """Every key whose map this edit opened."""

    def _open(self, key: KT) -> _Flat[MT, VT]:
        inner = self.inner.get(key)
        if inner is None:
            inner = self.inner[key] = _Flat(self.outer.get(key) or _EMPTY)
            self.touched.add(key)
        return inner

    def get(self, key: KT) -> Map[MT, VT]:
        """The members of ``key`` as edited so far."""
        inner = self.inner.get(key)
        if inner is not None:
            return inner.finish()
        return self.outer.get(key) or _EMPTY

    def add(self, key: KT, member: MT, value: VT) -> None:
        self._open(key).set(member, value)

    def remove(self, key: KT, member: MT) -> None:
        self._open(key).pop(member)

    def finish(self) -> Map[KT, Map[MT, VT]]:
        for key, inner in self.inner.items():
            done = inner.finish()
            if len(done):
                self.outer.set(key, done)
            else:
                self.outer.pop(key)
        self.inner.clear()
        return self.outer.finish()

"""A JSON Patch guarded by its own ``test`` operations, sent again on a fresh read when the
object changed in between: how raygate writes into objects others write too (a pod's
scheduling gates in ``raygate uninstall``, a RayCluster's scale gates in
``raygate.server.controllers.scale_gates``). A failed ``test`` answers 422, a stale
``resourceVersion`` 409: read again, build the patch again, try again, up to ``ATTEMPTS``
times; then the refusal goes to the caller, like any other. A 404 is the object gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from raygate.server.kube.transport import ApiError, NotServed

__all__ = ["ATTEMPTS", "CONFLICTS", "Ops", "patch_guarded"]

ATTEMPTS = 3
CONFLICTS = frozenset({409, 422})
"""The answers of a patch whose object changed since it was read."""

Ops = list[dict[str, Any]]
T = TypeVar("T")


def patch_guarded(read: Callable[[], T | None], ops_of: Callable[[T], Ops],
                  send: Callable[[Ops], object], *, first: T | None = None,
                  on_conflict: Callable[[], object] = lambda: None) -> Ops | None:
    """Read the object (``first`` on the first attempt when the caller has it), make its
    patch (``ops_of``) and ``send`` it: the patch sent, [] when there was nothing to do,
    None when the object is gone (``read`` gave None, or a 404). ``on_conflict`` is told
    of each attempt that is tried again."""
    for attempt in range(ATTEMPTS):
        try:
            current = first if attempt == 0 and first is not None else read()
            if current is None:
                return None
            ops = ops_of(current)
            if ops:
                send(ops)
            return ops
        except NotServed:
            return None
        except ApiError as exc:
            if exc.code not in CONFLICTS or attempt == ATTEMPTS - 1:
                raise
            on_conflict()
    raise AssertionError("the loop returns or raises")  # pragma: no cover

"""The guarded patch both raygate's scale-gate writer and ``raygate uninstall`` send
(``kube.guarded_patch``): read, patch, and on a changed object read again."""

from __future__ import annotations

import pytest

from raygate.server.kube.guarded_patch import ATTEMPTS, Ops, patch_guarded
from raygate.server.kube.transport import ApiError, NotServed

OPS: Ops = [{"op": "remove", "path": "/x"}]


class Object:
    """Answers each send with the next of ``answers`` (an error, or None: accepted)."""

    def __init__(self, answers: list[ApiError | None]) -> None:
        self.answers = answers
        self.reads = self.sends = self.conflicts = 0

    def read(self) -> str:
        self.reads += 1
        return "read"

    def send(self, ops: Ops) -> None:
        self.sends += 1
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer

    def conflict(self) -> None:
        self.conflicts += 1


@pytest.mark.parametrize(("answers", "result", "reads", "sends"), [
    ([None], OPS, 0, 1),  # the caller's own read goes first
    ([ApiError(422), None], OPS, 1, 2),  # a failed test: read again, sent again
    ([ApiError(409), ApiError(422), None], OPS, 2, 3),
    ([NotServed(404)], None, 0, 1),  # gone
])
def test_a_changed_object_is_read_again(answers: list[ApiError | None], result: Ops | None,
                                        reads: int, sends: int) -> None:
    obj = Object(answers)
    assert patch_guarded(obj.read, lambda _: OPS, obj.send, first="listed",
                         on_conflict=obj.conflict) == result
    assert (obj.reads, obj.sends, obj.conflicts) == (reads, sends, sends - 1)


@pytest.mark.parametrize("error", [ApiError(422), ApiError(403)])
def test_a_refusal_goes_to_the_caller(error: ApiError) -> None:
    obj = Object([error] * ATTEMPTS)
    with pytest.raises(ApiError):
        patch_guarded(obj.read, lambda _: OPS, obj.send)
    assert obj.sends == (ATTEMPTS if error.code == 422 else 1)


@pytest.mark.parametrize(("read", "result"), [
    (lambda: None, None),  # the object is not there
    (lambda: "read", []),  # nothing to do: nothing sent
])
def test_nothing_is_sent_without_a_patch(read: object, result: Ops | None) -> None:
    obj = Object([])
    assert patch_guarded(read, lambda _: [], obj.send) == result  # type: ignore[arg-type]
    assert obj.sends == 0

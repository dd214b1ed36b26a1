"""Every error raygate's API replies with comes back out of the clients as the same type,
with its message, through ``raygate.contract.errors``' tables: over HTTP (the server's
``reply_for``, the HTTP client's ``_raise``) and over gRPC (``grpc_status_for``, the gRPC
client's ``_error``); ``synced`` survives both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from raygate.client import GrpcAdmissionClient, HttpAdmissionClient
from raygate.contract.errors import (
    BadRequest,
    Forbidden,
    MissingField,
    NotFound,
    PayloadTooLarge,
    RayClusterNotFound,
    RaygateError,
    Unauthorized,
    Unavailable,
    grpc_status_for,
)
from raygate.server.http.routes import reply_for

ERRORS = [
    BadRequest("cannot decode request"), MissingField("Pod"), PayloadTooLarge("too big"),
    NotFound("no route /v1/nothing"), RayClusterNotFound("ray", "demo", synced=True),
    RayClusterNotFound("ray", "demo", synced=False), Unauthorized("no bearer token"),
    Forbidden('user "u" may not get rayclusters'), Unavailable("shutting down"),
]
IDS = [f"{type(e).__name__}-{getattr(e, 'synced', '')}" for e in ERRORS]


def _same(raised: RaygateError, error: RaygateError) -> None:
    # A MissingField is a BadRequest on the wire: the client knows no more.
    assert type(raised) is (BadRequest if isinstance(error, BadRequest) else type(error))
    if isinstance(error, RayClusterNotFound):
        assert isinstance(raised, RayClusterNotFound) and raised.synced == error.synced


@pytest.mark.parametrize("error", ERRORS, ids=IDS)
def test_over_http(error: RaygateError) -> None:
    status, body, _ = reply_for(error, None)
    with pytest.raises(RaygateError) as raised:
        HttpAdmissionClient._raise(status, body, "ray", "demo")
    _same(raised.value, error)
    assert str(raised.value) == str(error)


def test_over_http_an_unknown_status_or_body() -> None:
    with pytest.raises(RaygateError) as raised:
        HttpAdmissionClient._raise(502, b"<html>Bad Gateway</html>")
    assert type(raised.value) is RaygateError
    assert str(raised.value) == "HTTP 502: <html>Bad Gateway</html>"


class _Status(grpc.RpcError, grpc.Call):
    """A failed call as a grpc stub raises it."""

    def __init__(self, code: grpc.StatusCode, details: str,
                 trailer: tuple[tuple[str, str], ...]) -> None:
        self._code, self._details, self._trailer = code, details, trailer

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:  # pairs at run time; the stubs say _Metadatum
        return self._trailer

    def initial_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


@pytest.fixture
def client() -> Iterator[GrpcAdmissionClient]:
    made = GrpcAdmissionClient("raygate:9090")  # never connects: no call is made
    yield made
    made.close()


@pytest.mark.parametrize("error", ERRORS, ids=IDS)
def test_over_grpc(client: GrpcAdmissionClient, error: RaygateError) -> None:
    raised = client._error(_Status(*grpc_status_for(error)), "ray", "demo")
    _same(raised, error)
    # Unavailable names the raygate it could not reach (mostly the channel's own failure).
    prefix = "raygate at raygate:9090: " if isinstance(error, Unavailable) else ""
    assert str(raised) == prefix + str(error)


@pytest.mark.parametrize(("code", "kind", "message"), [
    (grpc.StatusCode.DEADLINE_EXCEEDED, Unavailable,
     "raygate at raygate:9090: Deadline Exceeded"),
    (grpc.StatusCode.INTERNAL, RaygateError, "gRPC INTERNAL: Deadline Exceeded"),
])
def test_over_grpc_the_channels_own_codes(client: GrpcAdmissionClient, code: grpc.StatusCode,
                                          kind: type[RaygateError], message: str) -> None:
    raised = client._error(_Status(code, "Deadline Exceeded", ()))
    assert type(raised) is kind
    assert str(raised) == message

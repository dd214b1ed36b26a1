"""The gRPC side of authz: a server interceptor that checks each call (and a Watch again
while it streams), the token taken from the call's metadata."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

from raygate.contract.errors import RaygateError, grpc_status_for
from raygate.server.authz.tokens import bearer_token
from raygate.server.kube.reviews import Access, User

POD_METHODS = frozenset({"/raygate.v1.Explain/Explain"})
"""gRPC methods whose request's ``name`` is a pod's: ``get`` in the namespace, no name."""
UNGUARDED_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})
"""gRPC services served to anyone: probes and schema discovery expose no cluster data."""
MIN_RECHECK_SECONDS = 1.0
"""A streaming call is checked again at most this often, even with no cache."""


class Guard(Protocol):
    """What the interceptor asks of the authorizer (``authorizer.Authorizer``)."""

    cache_seconds: float
    clock: Callable[[], float]

    async def authorize(self, token: str | None, access: Access) -> User: ...


def grpc_access(method: str, request: Any) -> Access:
    """What a gRPC request asks for, from its message's ``namespace`` and ``name``."""
    namespace, name = (text_field(request, f) for f in ("namespace", "name"))
    if method in POD_METHODS:
        return Access.to(namespace)
    return Access.one(namespace, name) if name else Access.listing(namespace)


def text_field(message: Any, field_name: str) -> str:
    value = getattr(message, field_name, "")
    return value if isinstance(value, str) else ""


class Interceptor(grpc.aio.ServerInterceptor):
    """Wraps each guarded method's handler so that it sees the request message (for its
    ``namespace``) before the servicer does."""

    def __init__(self, authorizer: Guard) -> None:
        self.authorizer = authorizer

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: Any) -> Any:
        handler = await continuation(details)
        service = details.method.lstrip("/").rpartition("/")[0]
        if handler is None or service in UNGUARDED_SERVICES:
            return handler
        token = metadata_token(details.invocation_metadata or ())
        method: str = details.method
        check = self._check

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                await check(grpc_access(method, request), context, token)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                access = grpc_access(method, request)
                await check(access, context, token)
                result = inner_stream(request, context)
                if hasattr(result, "__aiter__"):
                    async for message in self._rechecked(result, access, context, token):
                        yield message
                else:  # a handler that writes with context.write
                    await result

            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)

        # Client streams carry no namespace up front; raygate.v1 has none. Fail closed.
        async def refuse(_: Any, context: Any) -> None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "raygate does not serve client-streaming methods")

        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                refuse, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return grpc.stream_stream_rpc_method_handler(
            refuse, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    async def _check(self, access: Access, context: Any, token: str | None) -> None:
        try:
            await self.authorizer.authorize(token, access)
        except RaygateError as exc:
            code, message, trailer = grpc_status_for(exc)
            await context.abort(code, message, trailer)

    async def _rechecked(self, messages: AsyncIterator[Any], access: Access, context: Any,
                         token: str | None) -> AsyncIterator[Any]:
        """``messages``, checked again every ``cache_seconds`` (mostly a cache hit): a
        Watch outliving its token or RoleBinding ends with the refusal. Checked when the
        time has come by the authorizer's clock, before a message goes out or, on an
        idle stream, after waiting that long."""
        authorizer = self.authorizer
        every = max(authorizer.cache_seconds, MIN_RECHECK_SECONDS)
        due = authorizer.clock() + every
        iterator = aiter(messages)
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(iterator))
                await asyncio.wait((pending,), timeout=max(due - authorizer.clock(), 0.0))
                if authorizer.clock() >= due:
                    await self._check(access, context, token)  # aborts when refused
                    due = authorizer.clock() + every
                if not pending.done():
                    continue
                done, pending = pending, None
                try:
                    message = done.result()
                except StopAsyncIteration:
                    return
                yield message
        finally:
            if pending is not None:
                pending.cancel()


def metadata_token(metadata: Sequence[Any]) -> str | None:
    values = [value for key, value in metadata if key == "authorization"]
    if len(values) != 1:  # none, or ambiguous
        return None
    return bearer_token(values[0])

"""TokenReviews and SubjectAccessReviews: who a bearer token belongs to, and whether that
user may read RayClusters somewhere (``raygate.server.authz`` asks; this module speaks to the
API server, through the ``kubernetes`` client's REST layer and raygate's connection).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, TypeVar

import msgspec
import urllib3
from kubernetes import client as k8s
from kubernetes.config.config_exception import ConfigException

from raygate.server.kube.client import Connection
from raygate.server.kube.decode import status_of

__all__ = [
    "GROUP",
    "RESOURCE",
    "Access",
    "AccessDecision",
    "KubeReviewer",
    "ReviewUnavailable",
    "Reviewer",
    "User",
]

log = logging.getLogger("raygate.authz")

GROUP = "ray.io"
RESOURCE = "rayclusters"
TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECTACCESSREVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


# --- what is asked, and by whom ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class User:
    """Who a TokenReview says the caller is; the whole of it goes into the
    SubjectAccessReview (RBAC binds groups as well as names)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Access:
    """An access to RayClusters, as RBAC sees it: ``get`` (of one name, or of the
    namespace when the name is not a RayCluster's) or ``list``."""

    verb: str
    namespace: str
    """"" for cluster-wide: a SubjectAccessReview reads an empty namespace as "all
    namespaces" for a namespaced resource."""
    name: str = ""
    """The RayCluster's name; "" for none (RBAC's resourceNames then cannot match)."""

    @classmethod
    def one(cls, namespace: str, name: str) -> Access:
        """One RayCluster: ``get`` of its name. Without a namespace there is no single
        cluster to name: cluster-wide ``list``."""
        return cls("get", namespace, name) if namespace and name else cls.listing(namespace)

    @classmethod
    def listing(cls, namespace: str) -> Access:
        """Every RayCluster of a namespace ("" for all): ``list`` there."""
        return cls("list", namespace)

    @classmethod
    def to(cls, namespace: str) -> Access:
        """A read about one namespace that names no RayCluster (an explained pod):
        ``get`` there; "" for cluster-wide ``list``."""
        return cls("get", namespace) if namespace else cls.listing("")

    def describe(self) -> str:
        where = f'in namespace "{self.namespace}"' if self.namespace else "cluster-wide"
        named = f' "{self.name}"' if self.name else ""
        return f"{self.verb} {RESOURCE}.{GROUP}{named} {where}"


@dataclass(frozen=True, slots=True)
class AccessDecision:
    allowed: bool
    reason: str = ""
    """The authorizer's reason, for raygate's log only (it may describe RBAC bindings)."""


class ReviewUnavailable(Exception):
    """The API server did not give an answer (unreachable, timed out, refused raygate
    itself, or answered something that is not a review)."""


class Reviewer(Protocol):
    """The two API calls, blocking; ``KubeReviewer`` makes them."""

    def review_token(self, token: str, audiences: tuple[str, ...] = ()) -> User | None:
        """The user the token belongs to; None when it authenticates nobody (or, with
        ``audiences``, when it is not valid for any of them)."""
        ...

    def review_access(self, user: User, access: Access) -> AccessDecision: ...

    def close(self) -> None: ...


# --- the wire (authentication.k8s.io/v1, authorization.k8s.io/v1) -----------------------


class _TokenReviewSpec(msgspec.Struct, omit_defaults=True):
    token: str
    # Empty (left out): the token must be valid for the API server itself, as for
    # kubectl (an empty spec.audiences means the API server's own audiences).
    audiences: list[str] = msgspec.field(default_factory=list)


class _TokenReview(msgspec.Struct, rename="camel"):
    spec: _TokenReviewSpec
    api_version: str = "authentication.k8s.io/v1"
    kind: str = "TokenReview"


class _UserInfo(msgspec.Struct):
    username: str = ""
    uid: str = ""
    groups: list[str] | None = None
    extra: dict[str, list[str]] | None = None


class _TokenReviewStatus(msgspec.Struct):
    # Every field is omitempty upstream: an unknown token comes back as {"user": {}}.
    authenticated: bool = False
    user: _UserInfo = msgspec.field(default_factory=_UserInfo)
    error: str = ""
    # The audiences of spec.audiences the token is valid for (an audience-aware
    # authenticator fills it; empty means "valid for the API server's own").
    audiences: list[str] | None = None


class _TokenReviewReply(msgspec.Struct):
    status: _TokenReviewStatus = msgspec.field(default_factory=_TokenReviewStatus)


class _ResourceAttributes(msgspec.Struct, omit_defaults=True):
    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""


class _AccessReviewSpec(msgspec.Struct, rename="camel", omit_defaults=True):
    resource_attributes: _ResourceAttributes
    user: str
    uid: str = ""
    groups: list[str] = msgspec.field(default_factory=list)
    extra: dict[str, list[str]] = msgspec.field(default_factory=dict)


class _AccessReview(msgspec.Struct, rename="camel"):
    spec: _AccessReviewSpec
    api_version: str = "authorization.k8s.io/v1"
    kind: str = "SubjectAccessReview"


class _AccessReviewStatus(msgspec.Struct, rename="camel"):
    allowed: bool = False
    denied: bool = False
    reason: str = ""
    evaluation_error: str = ""


class _AccessReviewReply(msgspec.Struct):
    status: _AccessReviewStatus = msgspec.field(default_factory=_AccessReviewStatus)


_TOKEN_REPLY = msgspec.json.Decoder(_TokenReviewReply)
_ACCESS_REPLY = msgspec.json.Decoder(_AccessReviewReply)


_Reply = TypeVar("_Reply", _TokenReviewReply, _AccessReviewReply)


class KubeReviewer:
    """TokenReviews and SubjectAccessReviews through the ``kubernetes`` client's REST layer,
    with the connection raygate lists and watches with (its auth, TLS and proxy)."""

    def __init__(self, connection: Connection, timeout: float = 5.0) -> None:
        self.api = k8s.ApiClient(connection.configuration)
        self.timeout = timeout
        self.where = connection.description

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def review_token(self, token: str, audiences: tuple[str, ...] = ()) -> User | None:
        reply = self._create(TOKENREVIEWS, _TokenReview(_TokenReviewSpec(token, list(audiences))),
                             _TOKEN_REPLY)
        status = reply.status
        if not status.authenticated:
            if status.error:
                # The authenticator could not check it (e.g. a webhook down, or the token
                # is for other audiences): still no identity, so 401; the reason is for
                # the operator.
                log.info("TokenReview did not authenticate a caller: %s", status.error)
            return None
        if audiences and not set(status.audiences or ()) & set(audiences):
            # TokenReviewStatus.audiences: a client that sets spec.audiences must find one
            # of them here; empty means an authenticator that ignored them (the token is
            # then only known valid for the API server itself).
            log.info("TokenReview authenticated a caller but not for raygate's audiences "
                     "%s (valid for: %s): refused", list(audiences),
                     status.audiences or "the API server's own")
            return None
        info = status.user
        return User(info.username, info.uid, tuple(info.groups or ()),
                    tuple(sorted((k, tuple(v)) for k, v in (info.extra or {}).items())))

    def review_access(self, user: User, access: Access) -> AccessDecision:
        review = _AccessReview(_AccessReviewSpec(
            _ResourceAttributes(access.verb, GROUP, RESOURCE, access.namespace, access.name),
            user=user.name, uid=user.uid, groups=list(user.groups),
            extra={k: list(v) for k, v in user.extra}))
        status = self._create(SUBJECTACCESSREVIEWS, review, _ACCESS_REPLY).status
        if status.evaluation_error:
            # RBAC may still have decided (a missing role, others enough): log, go on.
            log.debug("SubjectAccessReview for %s: evaluation error: %s", user.name,
                      status.evaluation_error)
        # allowed=false with denied=false is "no opinion": not allowed either.
        return AccessDecision(status.allowed and not status.denied, status.reason)

    def _create(self, path: str, review: msgspec.Struct,
                decoder: msgspec.json.Decoder[_Reply]) -> _Reply:
        what = f"POST {path}"
        try:
            # The client's REST layer JSON-encodes a dict body itself; the review is tiny.
            # Inside the try: this is where the client refreshes raygate's own token
            # (in-cluster file, exec plugin), which can fail like the call itself.
            method, url, headers, body, _ = self.api.param_serialize(
                "POST", path, body=msgspec.to_builtins(review),
                header_params={"Accept": "application/json",
                               "Content-Type": "application/json"},
                # The same token refresh as the list/watch requests.
                auth_settings=["BearerToken"],
            )
            rest = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=(self.timeout, self.timeout))
            response: urllib3.BaseHTTPResponse = rest.response
            try:
                data: bytes = response.data
            finally:
                response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError, ConfigException) as exc:
            raise ReviewUnavailable(f"{what}: {exc}") from None
        except k8s.ApiException as exc:  # the client's wrapper of TLS failures
            raise ReviewUnavailable(f"{what}: {exc.reason}") from None
        # Reviews are "created" but never stored: 201 Created, or 200 from some proxies.
        if response.status not in (200, 201):
            message = status_of(data).message
            hint = (" (raygate's ClusterRole needs create on tokenreviews and "
                    "subjectaccessreviews)" if response.status == 403 else "")
            raise ReviewUnavailable(f"{what}: {response.status}: {message}{hint}")
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ReviewUnavailable(f"{what}: not a review: {exc}") from None

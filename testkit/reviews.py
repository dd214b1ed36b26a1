"""The API-server double's answers to TokenReviews (``authentication.k8s.io/v1``) and
SubjectAccessReviews (``authorization.k8s.io/v1``): validated as kube-apiserver validates
them, answered from a table of tokens (``users``) and of grants (``grant``), as RBAC
would. ``testkit.apiserver.ApiServerDouble`` is one ``ReviewTable``."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from testkit.resources import Obj

__all__ = ["ACCESS_REVIEWS", "API_AUDIENCES", "TOKEN_REVIEWS", "ReviewTable", "ReviewUser"]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)
"""kube-apiserver's default ``--api-audiences`` (its service account issuer)."""


@dataclass(frozen=True)
class ReviewUser:
    """What a TokenReview answers for a token the double knows."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    audiences: tuple[str, ...] = ()
    """What the token is valid for (a projected token's audiences); () for the API
    server's own."""


class ReviewTable:
    """Tokens and grants, and the reviews answered from them."""

    def __init__(self) -> None:
        self.users: dict[str, ReviewUser] = {}
        """TokenReview: token -> the user it authenticates; any other token is rejected."""
        self.grants: set[tuple[str, str, str, str, str]] = set()
        """SubjectAccessReview: (subject, verb, namespace, resource, name) allowed; see
        ``grant``."""
        self.audience_aware = True
        """False: answer TokenReviews as an authenticator that ignores ``spec.audiences``
        (an old webhook): no ``status.audiences``, whatever was asked."""
        self.reviews: list[tuple[str, Obj]] = []
        """(path, body) of every review POSTed, in order."""
        self.review_gate = threading.Event()
        """Reviews are answered only while set (clear it to hold them: a slow server)."""
        self.review_gate.set()
        self.api_audiences: tuple[str, ...] = API_AUDIENCES
        """What a token is valid for when its entry names no audiences."""
        self._review_lock = threading.RLock()

    def grant(self, subject: str, verb: str, resource: str, namespace: str = "",
              name: str = "") -> None:
        """Allow ``subject`` (a user name or a group) ``verb`` on ``resource`` in
        ``namespace``; "" for every namespace, as a ClusterRoleBinding does. With
        ``name``, only requests naming it (``resourceNames``: a request without a name,
        such as a list, is not allowed by such a rule)."""
        with self._review_lock:
            self.grants.add((subject, verb, namespace, resource, name))

    def revoke(self, subject: str, verb: str, resource: str, namespace: str = "",
               name: str = "") -> None:
        """Take back a ``grant`` (a RoleBinding deleted)."""
        with self._review_lock:
            self.grants.discard((subject, verb, namespace, resource, name))

    def allowed(self, user: str, groups: Iterable[str], verb: str, namespace: str,
                resource: str, *, name: str = "") -> bool:
        with self._review_lock:
            return any((subject, verb, where, resource, named) in self.grants
                       for subject in (user, *groups) for where in {namespace, ""}
                       for named in {name, ""})

    def review_count(self, path: str) -> int:
        with self._review_lock:
            return sum(1 for p, _ in self.reviews if p == path)

    def record_review(self, path: str, review: Any) -> None:
        """Keep a review POSTed (``reviews``), before it is answered."""
        with self._review_lock:
            self.reviews.append((path, review))

    def answer_review(self, path: str, review: Any) -> Obj | str:
        """The review POSTed to ``path`` with its status, or why kube-apiserver would
        refuse it."""
        if path == TOKEN_REVIEWS:
            return self._token_review(review)
        return self._access_review(review)

    def _token_review(self, review: Any) -> Obj | str:
        if not isinstance(review, dict) or review.get("apiVersion") != "authentication.k8s.io/v1" \
                or review.get("kind") != "TokenReview":
            return "expected a TokenReview of authentication.k8s.io/v1"
        token = (review.get("spec") or {}).get("token")
        if not isinstance(token, str) or not token:
            return "spec.token: Required value"
        asked = (review.get("spec") or {}).get("audiences") or []
        user = self.users.get(token)
        # As kube-apiserver answers: every status field is omitempty.
        status: Obj = {"user": {}}
        if user is not None and not self.audience_aware:
            status = {"authenticated": True, "user": _user_info(user)}
        elif user is not None:
            # An empty spec.audiences means the API server's own; the answer's audiences
            # are those asked for that the token is valid for, and none means
            # unauthenticated.
            wanted = asked or list(self.api_audiences)
            valid = [a for a in wanted if a in (user.audiences or self.api_audiences)]
            if valid:
                status = {"authenticated": True, "user": _user_info(user), "audiences": valid}
            else:
                status = {"user": {}, "error": "[invalid bearer token, token audiences "
                          f"{list(user.audiences or self.api_audiences)} is invalid for the "
                          f"target audiences {wanted}]"}
        return {**review, "metadata": {"creationTimestamp": None}, "status": status}

    def _access_review(self, review: Any) -> Obj | str:
        if not isinstance(review, dict) or review.get("apiVersion") != "authorization.k8s.io/v1" \
                or review.get("kind") != "SubjectAccessReview":
            return "expected a SubjectAccessReview of authorization.k8s.io/v1"
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if not isinstance(attributes, dict) and not spec.get("nonResourceAttributes"):
            return "spec.resourceAttributes: exactly one of resourceAttributes and " \
                   "nonResourceAttributes must be specified"
        if not spec.get("user") and not spec.get("groups"):
            return "spec.user: at least one of user or group must be specified"
        unknown = set(spec) - {"resourceAttributes", "nonResourceAttributes", "user", "groups",
                               "extra", "uid"}
        if unknown:
            return f"spec: unknown fields {sorted(unknown)}"
        attributes = attributes or {}
        allowed = self.allowed(spec.get("user", ""), spec.get("groups") or (),
                               attributes.get("verb", ""), attributes.get("namespace", ""),
                               f"{attributes.get('resource', '')}.{attributes.get('group', '')}",
                               name=attributes.get("name", ""))
        status: Obj = {"allowed": allowed}
        if allowed:
            status["reason"] = "allowed by the double's grant table"
        return {**review, "metadata": {"creationTimestamp": None}, "status": status}


def _user_info(user: ReviewUser) -> Obj:
    info: Obj = {"username": user.username, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = user.extra
    return info

"""The few writes raygate makes, as ``KubeTransport``'s methods (a mixin: the transport
holds the client and the request timeout they use): the stale-refusal annotation of a pod
(``raygate.server.controllers.stale_refusals``), the release of a gated pod
(``raygate.server.controllers.gate_release``), the floors' PodDisruptionBudgets
(``raygate.server.controllers.floor_budgets``), the Events raygate says
(``raygate.server.controllers.events``), and what ``raygate uninstall`` undoes
(``raygate.server.uninstall``): raygate's webhook configuration, its Deployment's
replicas, the scale gates it wrote in RayClusters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import msgspec
import urllib3
from kubernetes import client as k8s

from raygate.policy.budgets import LABEL_RAYCLUSTER
from raygate.server.kube.decode import STATUS
from raygate.server.kube.transport import TransportError, api_error
from raygate.server.wire import DECODE_ERRORS, kube

__all__ = ["FIELD_MANAGER", "Writes"]

FIELD_MANAGER = "raygate"
"""The field manager of raygate's server-side applies."""

class _BudgetItem(msgspec.Struct):
    metadata: kube.ObjectMeta = msgspec.field(default_factory=kube.ObjectMeta)


class _BudgetList(msgspec.Struct):
    items: list[_BudgetItem] | None = None


_BUDGET_LIST = msgspec.json.Decoder(_BudgetList)


class _ScaleStatus(msgspec.Struct):
    selector: str = ""


class _Scale(msgspec.Struct):
    status: _ScaleStatus = msgspec.field(default_factory=_ScaleStatus)


_SCALE = msgspec.json.Decoder(_Scale)


def _finish(response: object) -> bytes:
    """Read a reply, so its connection goes back to the pool (with
    ``_preload_content=False`` the client returns urllib3's response, whatever its type
    hints say); its body, for the few callers that use it."""
    if not isinstance(response, urllib3.BaseHTTPResponse):
        return b""
    try:
        data: bytes = response.data
    finally:
        response.release_conn()
    return data


def _api_failure(exc: k8s.ApiException, what: str) -> Exception:
    """The API server's refusal (403, 422, ...) as an ``ApiError`` with its message."""
    body = exc.body if isinstance(exc.body, bytes | str) else b""
    try:
        status = STATUS.decode(body)
    except DECODE_ERRORS:
        status = kube.Status()
    code = exc.status if isinstance(exc.status, int) else 0
    if code == 0:  # the client's wrapper of a failure below HTTP
        return TransportError(f"{what}: {exc.reason}")
    return api_error(code, status.reason or str(exc.reason or ""),
                     f"{what}: {status.message or ''}")


def _write(what: str, call: Callable[[], object], *, gone_ok: bool = False) -> bytes | None:
    """Make one write (``call``): its reply's body; None when ``gone_ok`` and the object is
    not there (404). Raises ``ApiError`` (the API server's refusal, with its message) or
    ``TransportError`` (no answer), each naming ``what``."""
    try:
        return _finish(call())
    except k8s.ApiException as exc:
        if gone_ok and exc.status == 404:
            return None
        raise _api_failure(exc, what) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TransportError(f"{what}: {exc}") from None


class Writes:
    """Needs ``api`` (the client) and ``request_timeout``; ``get`` for the list."""

    api: k8s.ApiClient
    request_timeout: float
    get: Callable[[str, list[tuple[str, str]]], bytes]
    """``KubeTransport.get``: a GET of ``path`` with ``query``, the body's bytes."""

    @property
    def _timeout(self) -> tuple[float, float]:
        return (self.request_timeout, self.request_timeout)

    @property
    def _short(self) -> tuple[float, float]:
        """At most 5 s: a pod's patch (a shutdown waits for it) and an Event are not worth
        a longer wait."""
        timeout = min(self.request_timeout, 5.0)
        return (timeout, timeout)

    def annotate_pod(self, namespace: str, name: str, uid: str,
                     annotations: Mapping[str, str]) -> None:
        """Set ``annotations`` on a pod, if it is still the pod ``uid``: the UID in the
        patch is a precondition (a pod made anew under the same name answers 422, as
        ``metadata.uid`` cannot change; one that is gone, 404). A strategic merge patch,
        said so: the client's default for a patch is a JSON Patch, which a dict is not."""
        body = {"metadata": {"uid": uid, "annotations": dict(annotations)}}
        self._patch_pod(namespace, name, body, "application/strategic-merge-patch+json")

    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """Apply a JSON Patch (RFC 6902) to a pod: all its operations or none, so a
        ``test`` among them is a precondition of the rest (a failed one answers 422)."""
        self._patch_pod(namespace, name, ops, "application/json-patch+json")

    def _patch_pod(self, namespace: str, name: str,
                   body: dict[str, Any] | list[dict[str, Any]], content_type: str) -> None:
        _write(f"PATCH pod {namespace}/{name}", lambda: k8s.CoreV1Api(
            self.api).patch_namespaced_pod(
                name, namespace, body, _preload_content=False, _content_type=content_type,
                _request_timeout=self._short))

    # --- PodDisruptionBudgets (raygate.server.controllers.floor_budgets) ---------------------

    def apply_budget(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Server-side apply of a PodDisruptionBudget, as field manager ``raygate``, forced:
        raygate owns every field it sets, so two replicas applying the same object
        converge on it, and a field another manager took is taken back."""
        _write(f"APPLY poddisruptionbudget {namespace}/{name}", lambda: k8s.PolicyV1Api(
            self.api).patch_namespaced_pod_disruption_budget(
                name, namespace, dict(body), field_manager=FIELD_MANAGER, force=True,
                _content_type="application/apply-patch+yaml", _preload_content=False,
                _request_timeout=self._timeout))

    def delete_budget(self, namespace: str, name: str) -> None:
        """Delete a PodDisruptionBudget; one that is gone already is no error."""
        _write(f"DELETE poddisruptionbudget {namespace}/{name}", lambda: k8s.PolicyV1Api(
            self.api).delete_namespaced_pod_disruption_budget(
                name, namespace, _preload_content=False, _request_timeout=self._timeout),
            gone_ok=True)

    def list_budgets(self, label_selector: str) -> list[tuple[str, str, str]]:
        """``(namespace, name, raygate.io/raycluster label)`` of every
        PodDisruptionBudget ``label_selector`` selects, in every namespace."""
        query = [("labelSelector", label_selector)]
        data = self.get("/apis/policy/v1/poddisruptionbudgets", query)
        try:
            listing = _BUDGET_LIST.decode(data)
        except DECODE_ERRORS as exc:
            raise TransportError(f"LIST poddisruptionbudgets: not a list: {exc}") from None
        return [(item.metadata.namespace, item.metadata.name,
                 (item.metadata.labels or {}).get(LABEL_RAYCLUSTER, ""))
                for item in listing.items or ()]

    # --- Events (raygate.server.controllers.events) -----------------------------------

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create an ``events.k8s.io/v1`` Event."""
        _write(f"CREATE event {body['metadata']['name']}", lambda: k8s.EventsV1Api(
            self.api).create_namespaced_event(
                # The client serialises a dict as it is: its model class would only be
                # turned back into this dict.
                namespace, cast(Any, dict(body)), _preload_content=False,
                _request_timeout=self._short))

    def patch_event(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Merge-patch an Event (its ``series``)."""
        _write(f"PATCH event {name}", lambda: k8s.EventsV1Api(self.api).patch_namespaced_event(
            name, namespace, dict(body), _preload_content=False,
            _content_type="application/merge-patch+json", _request_timeout=self._short))

    # --- raygate uninstall (raygate.server.uninstall) ----------------------------------------

    def delete_webhook_configuration(self, name: str) -> bool:
        """Delete the MutatingWebhookConfiguration ``name``: True, or False when there is
        none (deleted already, or never installed)."""
        return _write(f"DELETE mutatingwebhookconfiguration {name}", lambda: (
            k8s.AdmissionregistrationV1Api(self.api).delete_mutating_webhook_configuration(
                name, _preload_content=False, _request_timeout=self._timeout)),
            gone_ok=True) is not None

    def scale_to_zero(self, namespace: str, name: str) -> str | None:
        """Set the Deployment's replicas to 0 (its scale subresource): the label selector
        of its pods, or None when there is no such Deployment."""
        what = f"SCALE deployment {namespace}/{name}"
        data = _write(what, lambda: k8s.AppsV1Api(self.api).patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": 0}}, _preload_content=False,
            _content_type="application/merge-patch+json", _request_timeout=self._timeout),
            gone_ok=True)
        if data is None:
            return None
        try:
            return _SCALE.decode(data).status.selector
        except DECODE_ERRORS as exc:
            raise TransportError(f"{what}: not a Scale: {exc}") from None

    def patch_raycluster(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """Apply a JSON Patch (RFC 6902) to a RayCluster: all its operations or none, as
        field manager ``raygate`` (its ``managedFields`` say who wrote the entries)."""
        _write(f"PATCH raycluster {namespace}/{name}", lambda: k8s.CustomObjectsApi(
            self.api).patch_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayclusters", name, ops, _preload_content=False,
                field_manager=FIELD_MANAGER, _content_type="application/json-patch+json",
                _request_timeout=self._timeout))

    # --- scale gates (raygate.server.controllers.scale_gates) ---------------------------

    def raycluster_json(self, namespace: str, name: str) -> dict[str, Any]:
        """The RayCluster as served now, as JSON; raises ``NotServed`` when it is gone."""
        return self._get_json(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}")

    def raycluster_openapi(self) -> dict[str, Any]:
        """The OpenAPI v3 document of ``ray.io/v1`` (the served CRD schemas, with their
        ``x-kubernetes-*`` extensions); readable by every authenticated client (the
        system:discovery ClusterRole), no RBAC rule of raygate's own. ``NotServed``: no
        ray.io/v1 at all."""
        return self._get_json("/openapi/v3/apis/ray.io/v1")

    def _get_json(self, path: str) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], msgspec.json.decode(self.get(path, [])))
        except DECODE_ERRORS as exc:
            raise TransportError(f"GET {path}: not JSON: {exc}") from None

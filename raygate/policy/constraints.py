"""Where a pod may go, as kube-scheduler's NodeAffinity and TaintToleration judge it:
node taints, pod tolerations, node selector requirements. raygate keeps them for pods its
placement gate holds and unbound Ray pods (``raygate.policy.room``: whether a held scale-up
fits, whether only GPU nodes have room for a waiting pod)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

__all__ = ["NodeConstraints", "NodeRequirement", "Taint", "Toleration"]

_NONE: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Taint:
    """A node's taint that keeps pods off (``NoSchedule``, ``NoExecute``)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    """Empty: every effect."""

    def tolerates(self, taint: Taint) -> bool:
        """core/v1's ``Toleration.ToleratesTaint``: an empty key with ``Exists`` matches
        every taint; an operator it does not know matches none."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One ``matchExpressions`` (or ``matchFields``, key ``metadata.name``) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """k8s.io/apimachinery's label selector requirement, as a node selector reads it;
        an operator it does not know matches no node."""
        value = name if self.key == "metadata.name" else labels.get(self.key)
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator in ("Exists", "DoesNotExist"):
            return (value is not None) == (self.operator == "Exists")
        if self.operator in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """Where a pod may go as kube-scheduler's NodeAffinity and TaintToleration judge it:
    kept only while raygate's placement gate holds the pod or it is an unbound Ray pod."""

    selector: Mapping[str, str] = field(default_factory=lambda: _NONE)
    """``spec.nodeSelector``."""
    terms: tuple[tuple[NodeRequirement, ...], ...] | None = None
    """The required node affinity's terms (ORed; each one's requirements ANDed); None: no
    required node affinity."""
    tolerations: tuple[Toleration, ...] = ()

    def admits(self, name: str, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
        """Whether the node ``name`` with ``labels`` and ``taints`` may take the pod."""
        if any(labels.get(k) != v for k, v in self.selector.items()):
            return False
        # An empty term matches no node (core/v1's NodeSelectorTerm).
        if self.terms is not None and not any(
                term and all(r.matches(name, labels) for r in term) for term in self.terms):
            return False
        return all(any(t.tolerates(taint) for t in self.tolerations) for taint in taints)

    def without(self, written: frozenset[NodeRequirement]) -> NodeConstraints:
        """These constraints as they were before ``written`` was added to every term of
        their required node affinity (raygate's native rule, ``policy.native``): a term
        left empty held the rule alone, and with every term so, no required affinity was
        there."""
        if self.terms is None or not written:
            return self
        terms = tuple(tuple(r for r in term if r not in written) for term in self.terms)
        return replace(self, terms=terms if any(terms) else None)

"""The Ray autoscaler v2 (KubeRay), made to follow raygate's admission advice.

``raygate-autoscaler`` runs in the autoscaler container of a RayCluster's head pod in
place of ``ray kuberay-autoscaler`` (the autoscaler image's login profile, ``deploy/
ray-autoscaler/raygate-autoscaler.sh``, sends that command here while ``RAYGATE_URL`` is
set: KubeRay lets a RayCluster set the autoscaler's image and env, not its command). It runs the
stock KubeRay autoscaler with one difference: the cloud provider asks raygate, once per
autoscaler loop, what the scheduler is doing with the cluster's pods, and

* a pending worker raygate says to ``keep`` (waiting for gang admission, for capacity,
  starting) is never timed out and deleted, however long it waits;
* a pending worker raygate says to ``replace`` (stuck) is terminated through the normal
  path at once, instead of after ``allocate_status_timeout_s``;
* a worker group raygate says to ``hold`` gets no new pods: launches for it fail, and the
  scheduler ranks it last, so demand goes to other groups;
* a worker group with a scale gate (``scaleStrategy.scaleGate``, whoever wrote it) gets
  no new pods and its pending ones are no longer counted on, so the demand goes to the
  next group in Ray's order at once; raygate's own ``raygate.io/`` gates count only while
  raygate answers;
* a scale-down writes ``workersToDelete`` alone, keeping the gates;
* when raygate cannot be reached, everything is stock (one warning per outage) but for
  the other writers' gates.

Modules:

``settings``  the environment the entrypoint reads (no Ray needed)
``advice``    raygate's advice for one RayCluster, fetched with a bounded wait through
              ``raygate.client`` (no Ray)
``gates``     the scale gates to honour, and the scale-down write that keeps them (no Ray)
``scheduling`` what Ray's scheduler sees of held and gated groups (needs Ray)
``provider``  the ``KubeRayProvider`` subclass and the two reconciler hooks (needs Ray)
``cli``       the ``raygate-autoscaler`` entrypoint

None of them imports ``raygate.server`` or its dependencies. Only ``scheduling``,
``provider`` and ``cli`` import Ray, and ``provider`` (the only one to import
``scheduling``) refuses a Ray version other than ``TESTED_RAY_VERSIONS``: it relies on
private Ray interfaces (README, "Stop the autoscaler fighting the scheduler").
"""

from __future__ import annotations

from raygate.contract.command import CommandError

__all__ = ["TESTED_RAY_VERSIONS", "RayUnusable"]

TESTED_RAY_VERSIONS = ("2.60.0",)
"""The Ray versions ``provider`` is tested with (``make test-ray``); the ``ray`` extra
pins them."""


class RayUnusable(CommandError, ImportError):
    """``provider`` cannot be imported: Ray is missing, or not a version it is tested
    with. An ``ImportError`` to whoever imports it; ``raygate-autoscaler`` says it in a
    line and exits 2."""

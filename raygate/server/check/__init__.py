"""``raygate check``: RayCluster manifests (files, or a live cluster's RayClusters) checked
against KubeRay's CRD schema and the policy's rules (``raygate.policy.lint``).

``run`` runs a check and reports it; ``inputs`` reads what is checked, ``schema`` holds
KubeRay's CRD schemas, ``manifests`` checks one object, ``report`` renders the findings.
"""

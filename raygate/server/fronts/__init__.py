"""The protocol fronts: each decodes its peer's requests, asks the policy, encodes the
reply, and owns its routes (kube-scheduler's and Volcano's verbs, the admission-status and
explain APIs, the webhook, health)."""

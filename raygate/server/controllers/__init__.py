"""The controllers: loops that act on the cluster rather than answer a peer — the native
placement (the scheduling gate's release), the floor's PodDisruptionBudgets and the
requeue of stale refusals. They act only while this replica leads (``kube.leader``)."""

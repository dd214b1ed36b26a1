"""The controllers: loops that act on the cluster rather than answer a peer — the native
placement (the scheduling gate's release), the floor's PodDisruptionBudgets, the requeue
of stale refusals and the Events. Each writes only what it reconciles; following the cache
(``follow``), the retries and the keyed loop (``reconcile``) are the runtime's."""

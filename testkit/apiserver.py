"""A kube-apiserver test double: list and watch over real HTTP on loopback.

It speaks what raygate's list/watch relies on, as kube-apiserver does:

* one resourceVersion counter for every write (etcd's revision), set on each object;
* ``GET <collection>?limit=&continue=``: pages cut from one consistent state, each
  carrying that state's resourceVersion; a continue token the history has outgrown
  answers ``410 Expired``;
* ``GET <collection>?watch=true&resourceVersion=N``: a chunked stream of
  ``{"type": ..., "object": ...}`` lines, every change after N then live ones;
  ``BOOKMARK`` events (``allowWatchBookmarks``); a version older than the history gets
  an ``ERROR`` event with a 410 Status (as the watch cache answers), or an HTTP 410;
  the stream ends cleanly after ``timeoutSeconds``;
* the streaming list (``sendInitialEvents=true`` with ``resourceVersionMatch=
  NotOlderThan``): an ADDED event per object of the current state, in key order, then
  the BOOKMARK annotated ``k8s.io/initial-events-end`` (when bookmarks are allowed),
  then the watch goes on; a plain watch from "" or "0" is one too, as kube-apiserver
  defaults it. With ``watch_list`` False, as an API server with its WatchList gate off,
  ``sendInitialEvents`` is refused (422) and a watch from "0" starts with the state but
  without the bookmark that ends it (the watch cache's legacy answer);
* discovery of the custom resources installed (``GET /apis/<group>/<version>``), 404
  for the others; bearer-token auth (401 without it);
* ``POST`` TokenReviews (``authentication.k8s.io/v1``) and SubjectAccessReviews
  (``authorization.k8s.io/v1``), validated as kube-apiserver validates them, answered
  from a table of tokens (``users``) and of grants (``grant``), as RBAC would: a grant
  with namespace "" (a ClusterRoleBinding) allows every namespace, a grant with a name
  (a rule's ``resourceNames``) only requests for that name, and a subject is a user name
  or one of its groups. A token is valid for the audiences its entry lists (by default
  the API server's own, ``api_audiences``); a TokenReview's ``spec.audiences`` (empty:
  the API server's own) must meet them, else the token does not authenticate, and
  ``status.audiences`` is the intersection, as kube-apiserver answers.

And the faults a client must survive, on demand: dropped connections, a restart (all
connections cut, the port refused until ``start``, the history lost), compaction,
silent (stalled) streams, slow responses, error replies, raw lines of any content.

Objects are kept as JSON bytes, so a benchmark can load 150,000 pods cheaply: a write
given bytes replaces ``"__RV__"`` in them with the new resourceVersion.

Its parts, each below the one before: ``testkit.apiserver_http`` (the handler, and what a
request sees: ``Served``), ``testkit.store`` (objects, versions, history, LIST states,
watches), ``testkit.reviews`` (the review table), ``testkit.watch_list`` (the streaming
list's bytes), ``testkit.resources`` (what can be served).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from testkit.apiserver_http import Handler, Served
from testkit.resources import CORE, CRDS, DRA, Collection, Obj
from testkit.reviews import ACCESS_REVIEWS, API_AUDIENCES, TOKEN_REVIEWS, ReviewUser

__all__ = [
    "ACCESS_REVIEWS",
    "API_AUDIENCES",
    "CORE",
    "CRDS",
    "DRA",
    "TOKEN_REVIEWS",
    "ApiServerDouble",
    "Collection",
    "ReviewUser",
    "kubeconfig_text",
]


def kubeconfig_text(server: str, token: str = "", exec_command: list[str] | None = None,
                    context: str = "double") -> str:
    """A kubeconfig for ``server``: a static token, or an exec credential plugin."""
    if exec_command is not None:
        user: Obj = {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": exec_command[0], "args": exec_command[1:],
            "interactiveMode": "Never",
        }}
    else:
        user = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "double", "user": user}],
        "contexts": [{"name": context, "context": {"cluster": "double", "user": "double"}}],
    }
    return json.dumps(config, indent=1)


class ApiServerDouble(Served):
    """Serve ``collections`` (all core kinds; custom ones only once ``install``ed)."""

    def __init__(self, token: str = "raygate-test-token", *, host: str = "127.0.0.1",
                 port: int = 0, gone_as_http: bool = False, split_lines: bool = False) -> None:
        super().__init__(token, gone_as_http=gone_as_http, split_lines=split_lines)
        self.host = host
        self.port = port
        self._thread: threading.Thread | None = None

    # --- life -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ApiServerDouble:
        double = self

        class Serving(Handler):
            owner = double

        server = ThreadingHTTPServer((self.host, self.port), Serving)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="apiserver-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection, watches included (abruptly)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            watches = self.take_watches()
            conns = list(self._conns)
        for watch in watches:
            watch.dropped = True
            watch.lines.put(None)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)

    def restart(self, *, lose_history: bool = True) -> None:
        """``stop`` then ``start`` on the same port. A restarted kube-apiserver rebuilds
        its watch cache from the current state: older versions are gone (410)."""
        self.stop()
        if lose_history:
            self.compact()
        self.start()

    def kubeconfig(self, path: Path, *, exec_command: list[str] | None = None,
                   context: str = "double") -> Path:
        path.write_text(kubeconfig_text(self.url, self.token, exec_command, context))
        return path

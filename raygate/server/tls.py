"""TLS for raygate's listeners, with certificate files reloaded on change.

One ``CertReloader`` per set of files (certificate chain, key, optional client CA bundle).
``check`` (called every few seconds by the server) rebuilds the TLS state when a file
changed, and only when the new files make a working whole: a half-written file or a key
that does not match its certificate keeps the previous certificate in use, with a warning
that says why. Both servers then hand every *new* handshake the newest good state:

* HTTP (uvicorn, ``ssl.SSLContext``): the listener's context has an ``sni_callback``
  that switches each connection to the current context (``SSLObject.context = ...``,
  OpenSSL's ``SSL_set_SSL_CTX``), which takes the certificate, the key *and* the CA store
  of the new context: a CA removed from the bundle stops being trusted without a restart,
  which loading new files into the old context could not do (it only ever adds CAs).
  With a client CA the HTTP listener speaks TLS 1.3 only and issues no session tickets:
  a resumed session would skip the client-certificate check against the new CAs.
* gRPC: ``grpc.dynamic_ssl_server_credentials``, whose fetcher gRPC calls before every
  new handshake; it returns the new configuration once per reload.

Connections already open keep the certificate they were made with.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any

import grpc

from raygate.contract.command import ConfigError
from raygate.server.files import Stamp, file_stamp

__all__ = ["CertReloader", "TlsFiles"]

log = logging.getLogger("raygate.tls")

_Signature = tuple[Stamp, ...]


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    """PEM certificate chain, the server's own first."""
    key: str
    """PEM private key of the first certificate."""
    client_ca: str = ""
    """PEM CA bundle; when set, clients must present a certificate signed by one of them."""

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.cert, self.key, self.client_ca) if self.client_ca else (self.cert, self.key)


@dataclass(frozen=True)
class _Loaded:
    """One good load: the context for HTTP and the PEM bytes for gRPC, from the same
    bytes on disk."""

    context: ssl.SSLContext
    cert: bytes
    key: bytes
    client_ca: bytes | None
    generation: int


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class CertReloader:
    """The TLS state of one listener (or of two: HTTP and gRPC share the files)."""

    def __init__(self, files: TlsFiles, name: str) -> None:
        self.files = files
        self.name = name
        self.reloads = 0
        """Good reloads after the first load."""
        self.failures = 0
        """Changed files that did not load (the previous certificate stayed in use)."""
        self._missing = False
        try:
            self._seen = file_stamp(files.paths)
            self._loaded = self._load(self._seen, 0)
        except (*_LOAD_ERRORS, _Changed) as exc:
            # At start there is no previous certificate to keep: refuse to start.
            raise ConfigError([f"{name}: cannot load {self._describe()}: {_reason(exc)}"]) \
                from None

    @property
    def require_client_cert(self) -> bool:
        return bool(self.files.client_ca)

    @property
    def context(self) -> ssl.SSLContext:
        """The newest good context (what new HTTP handshakes use)."""
        return self._loaded.context

    def _describe(self) -> str:
        return ", ".join(self.files.paths)

    def _load(self, seen: _Signature, generation: int) -> _Loaded:
        """A context from the files; ``_Changed`` when they changed while being read (the
        next check tries again)."""
        files = self.files
        cert, key = _read(files.cert), _read(files.key)
        client_ca = _read(files.client_ca) if files.client_ca else None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # load_cert_chain checks that the key matches the certificate (OpenSSL
        # SSL_CTX_check_private_key), which is what catches a half-rotated pair.
        context.load_cert_chain(files.cert, files.key)
        if client_ca is not None:
            # From the file, as OpenSSL reads PEM: text outside the BEGIN/END lines (a
            # comment in any encoding) is skipped. The stamp check below tells whether
            # these are the bytes read above, for gRPC.
            context.load_verify_locations(cafile=files.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
            # A resumed session skips the client-certificate check, and what it resumes
            # from (ticket keys, TLS 1.2's session-ID cache) is the listener's first
            # context's, whatever the CAs are now. No tickets, and TLS 1.3 only (Python
            # cannot turn the TLS 1.2 session cache off): every handshake is checked
            # against the newest CAs.
            context.num_tickets = 0
            context.options |= ssl.OP_NO_TICKET
            context.minimum_version = ssl.TLSVersion.TLSv1_3
        if file_stamp(files.paths) != seen:
            raise _Changed
        return _Loaded(context, cert, key, client_ca, generation)

    def check(self) -> bool:
        """Reload when a file changed and the new files load; True when reloaded. Cheap
        when nothing changed (a stat per file)."""
        try:
            seen = file_stamp(self.files.paths)
        except OSError as exc:
            # Secret volumes swap a symlink, so a file is never missing while being
            # replaced there: this is worth a warning (once), and serving goes on.
            if not self._missing:
                log.warning("%s: cannot stat %s; keeping the previous certificate: %s",
                            self.name, self._describe(), _reason(exc))
            self._missing = True
            return False
        self._missing = False
        if seen == self._seen:
            return False
        try:
            loaded = self._load(seen, self._loaded.generation + 1)
        except _Changed:
            return False  # written to while read: the signature differs next time too
        except _LOAD_ERRORS as exc:
            self._seen = seen  # warn once per change, not at every check
            self.failures += 1
            log.warning("%s: new %s do not load; keeping the previous certificate: %s",
                        self.name, self._describe(), _reason(exc))
            return False
        self._seen = seen
        self._loaded = loaded
        self.reloads += 1
        log.info("%s: reloaded %s", self.name, self._describe())
        return True

    def listener_context(self) -> ssl.SSLContext:
        """A context for ``create_server`` that hands each new connection the newest good
        context during its handshake."""
        # The first good context listens; each handshake moves to the newest one.
        listener = self._loaded.context

        def switch(connection: ssl.SSLObject, _server_name: str | None,
                   _context: ssl.SSLContext) -> None:
            # Called for every ClientHello, with or without SNI; the verify mode stays
            # the listener's (the same in every context built from these files).
            current = self._loaded.context
            if connection.context is not current:
                connection.context = current

        listener.sni_callback = switch
        return listener

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Server credentials whose certificate follows the reloads."""
        first = self._loaded
        served = [first.generation]

        def configuration(loaded: _Loaded) -> Any:
            return grpc.ssl_server_certificate_configuration(
                [(loaded.key, loaded.cert)], root_certificates=loaded.client_ca)

        def fetch() -> Any:
            # gRPC calls this from its own threads before each handshake: read the state
            # once (one attribute load, atomic), answer None when nothing is new.
            loaded = self._loaded
            if loaded.generation == served[0]:
                return None
            served[0] = loaded.generation
            return configuration(loaded)

        return grpc.dynamic_ssl_server_credentials(
            configuration(first), fetch,
            require_client_authentication=self.require_client_cert)


class _Changed(Exception):
    """The files changed while they were being read."""


_LOAD_ERRORS = (OSError, ssl.SSLError, ValueError)
"""What files that do not make a working whole raise (ValueError: bytes that are not
what OpenSSL or Python expected)."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or ''}: {exc.strerror}".lstrip(": ")
    return str(exc) or type(exc).__name__

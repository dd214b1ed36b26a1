"""Certificates rotated under a running TLS or mTLS server: new connections get the new
certificate, bad new files keep the old one, a replaced client CA is the only one trusted
(its bundle's comments in any encoding), and polling outlives errors and missing files."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx
import pytest
import trustme

from raygate.server.tls import CertReloader, TlsFiles
from tests.conftest import ServerThread, wait_until
from tests.server.pki import (
    ANSWERED,
    Pki,
    der,
    grpc_health,
    grpc_refused,
    https_ok,
    reloads,
    served_cert,
    start,
)

# --- rotation ----------------------------------------------------------------------------


def test_a_rotated_certificate_is_used_by_new_connections(
    pki: Pki, mtls_server: ServerThread,
) -> None:
    client = pki.client_ca.issue_cert("raygate-client")
    old_trust = pki.client_context(cert=client)
    # The new certificate comes from a new CA: a client trusting only that CA can connect
    # once, and only once, the server has picked it up (observable over gRPC too).
    new_ca = trustme.CA()
    rotated = pki.issue(new_ca)
    new_trust = pki.client_context(ca=new_ca, cert=client)
    assert not https_ok(mtls_server, new_trust)
    assert grpc_refused(mtls_server, pki.grpc_credentials(ca=new_ca, cert=client))
    with httpx.Client(base_url=mtls_server.url, verify=old_trust, timeout=10) as kept:
        assert kept.get("/healthz").status_code == 200  # a connection made before
        pki.write(rotated)
        wait_until(lambda: https_ok(mtls_server, new_trust), "the rotated cert on HTTPS")
        assert served_cert(mtls_server, new_trust) == der(rotated)
        assert grpc_health(mtls_server, pki.grpc_credentials(ca=new_ca, cert=client)) in ANSWERED
        assert not https_ok(mtls_server, old_trust)
        assert grpc_refused(mtls_server, pki.grpc_credentials(cert=client))
        # The connection made before the rotation keeps its session.
        assert kept.get("/healthz").status_code == 200
    assert reloads(mtls_server, "loaded", new_trust) == 1


BAD_FILES: list[tuple[str, Callable[[Pki], None]]] = [
    # A new certificate whose key has not been written yet (a half-done rotation).
    ("key does not match", lambda pki: pki.write(pki.issue(), key=False)),
    ("certificate half written", lambda pki: pki._replace(
        pki.cert_file, pki.issue().cert_chain_pems[0].bytes()[:300])),
    ("key is garbage", lambda pki: pki._replace(pki.key_file, b"not a key\n")),
    ("certificate empty", lambda pki: pki._replace(pki.cert_file, b"")),
]


@pytest.mark.parametrize(("name", "spoil"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_new_files_keep_the_old_certificate(
    pki: Pki, tls_server: ServerThread, name: str, spoil: Callable[[Pki], None],
) -> None:
    trust = pki.client_context()
    spoil(pki)
    wait_until(lambda: reloads(tls_server, "failed") == 1, f"the failed reload ({name})")
    assert served_cert(tls_server, trust) == der(pki.served)
    assert grpc_health(tls_server, pki.grpc_credentials()) in ANSWERED
    # Good files again: picked up.
    fixed = pki.issue()
    pki.write(fixed)
    wait_until(lambda: served_cert(tls_server, trust) == der(fixed), "the good cert")
    assert reloads(tls_server, "loaded") == 1


def test_a_replaced_client_ca_is_the_only_one_trusted(
    pki: Pki, mtls_server: ServerThread,
) -> None:
    old_client = pki.client_ca.issue_cert("old-client")
    new_ca = trustme.CA()
    new_client = new_ca.issue_cert("new-client")
    assert https_ok(mtls_server, pki.client_context(cert=old_client))
    new_ca.cert_pem.write_to_path(str(pki.ca_file))
    wait_until(lambda: https_ok(mtls_server, pki.client_context(cert=new_client)),
               "the new client CA")
    # Replaced, not added to: the old CA's clients are refused without a restart.
    assert not https_ok(mtls_server, pki.client_context(cert=old_client))
    assert grpc_refused(mtls_server, pki.grpc_credentials(cert=old_client))
    assert grpc_health(mtls_server, pki.grpc_credentials(cert=new_client)) >= 0


def with_comment(ca: trustme.CA, comment: bytes) -> bytes:
    """A CA bundle as people write them: a comment line above the PEM block."""
    return b"# " + comment + b"\n" + ca.cert_pem.bytes()


COMMENTS = [
    ("utf-8", "Zertifizierungsstelle für Ärzte".encode()),
    ("latin-1", "Autorité de certification".encode("latin-1")),
]


@pytest.mark.parametrize(("name", "comment"), COMMENTS, ids=[c[0] for c in COMMENTS])
def test_a_client_ca_bundle_with_non_ascii_comments_loads_at_start_and_on_reload(
    pki: Pki, name: str, comment: bytes,
) -> None:
    pki.ca_file.write_bytes(with_comment(pki.client_ca, comment))
    server = start(pki, mtls=True)
    try:
        old_client = pki.client_ca.issue_cert("old-client")
        assert https_ok(server, pki.client_context(cert=old_client))
        new_ca = trustme.CA()
        new_client = new_ca.issue_cert("new-client")
        Pki._replace(pki.ca_file, with_comment(new_ca, comment))
        wait_until(lambda: https_ok(server, pki.client_context(cert=new_client)),
                   f"the new client CA with a {name} comment")
        assert not https_ok(server, pki.client_context(cert=old_client))
        assert grpc_health(server, pki.grpc_credentials(cert=new_client)) >= 0
        assert reloads(server, "loaded", pki.client_context(cert=new_client)) == 1
    finally:
        server.stop()


def test_certificate_polling_outlives_an_unexpected_error(
    pki: Pki, tls_server: ServerThread, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    reloader = tls_server.server.tls
    assert reloader is not None
    load = reloader._load
    failed = threading.Event()

    def fails_once(seen: tuple[tuple[int, int, int, int], ...], generation: int) -> object:
        # Whatever goes wrong that nobody foresaw (the CA bundle's TypeError once was).
        if not failed.is_set():
            failed.set()
            raise RuntimeError("unforeseen")
        return load(seen, generation)

    monkeypatch.setattr(reloader, "_load", fails_once)
    trust = pki.client_context()
    rotated = pki.issue()
    with caplog.at_level(logging.ERROR, logger="raygate.server"):
        pki.write(rotated)
        wait_until(failed.is_set, "the failing check")
        # The next check tries the same files again and loads them.
        wait_until(lambda: served_cert(tls_server, trust) == der(rotated),
                   "the rotated cert after the failed check")
    logged = [r for r in caplog.records if r.name == "raygate.server"]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
    assert "unforeseen" in str(logged[0].exc_info[1])


def test_a_missing_file_is_a_warning_once_per_disappearance(
    pki: Pki, caplog: pytest.LogCaptureFixture,
) -> None:
    reloader = CertReloader(TlsFiles(str(pki.cert_file), str(pki.key_file)), "TLS")

    def warnings() -> int:
        return sum(1 for r in caplog.records
                   if r.levelno == logging.WARNING and "cannot stat" in r.getMessage())

    with caplog.at_level(logging.WARNING, logger="raygate.tls"):
        for round_ in (1, 2):
            pki.key_file.unlink()
            for _ in range(3):
                assert not reloader.check()
            assert warnings() == round_
            back = pki.issue()
            pki.write(back)
            assert reloader.check()  # back, and new: loaded
    assert str(pki.key_file) in caplog.records[0].getMessage()

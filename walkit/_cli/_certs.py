"""Certificates for ``walkit sandbox --tls``: a private CA, a bookie certificate for the
sandbox's host, and a client certificate, made once and kept in ``DATA_DIR/tls``.

For a local cluster only: the files are 0600 in a 0700 directory, and the CA's key is not
kept (all of them are made anew if the host changes). Production clusters use certificates
from their own CA (``docs/security.md``).
Needs the ``cryptography`` package (the ``tls`` extra).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any, Final, final

import attrs

from walkit.errors import ConfigurationError

__all__ = ["SandboxCertificates", "sandbox_certificates"]

#: Lifetime of the sandbox's certificates.
VALID_DAYS: Final = 825


@final
@attrs.frozen
class SandboxCertificates:
    """Paths of the PEM files (see the module docs)."""

    ca: Path
    bookie_cert: Path
    bookie_key: Path
    client_cert: Path
    client_key: Path


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def sandbox_certificates(directory: Path, host: str) -> SandboxCertificates:
    """The sandbox's certificates in ``directory``, made if missing (or for another host)."""
    paths = SandboxCertificates(
        ca=directory / "ca.pem",
        bookie_cert=directory / "bookie.pem",
        bookie_key=directory / "bookie-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    host_file = directory / "host"
    fields = attrs.asdict(paths, recurse=False).values()
    if all(p.exists() for p in fields) and host_file.exists() and host_file.read_text() == host:
        return paths
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ConfigurationError(
            "walkit sandbox --tls needs the cryptography package (pip install 'walkit[tls]')"
        ) from None
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=VALID_DAYS)

    def key() -> Any:
        return ec.generate_private_key(ec.SECP256R1())

    def pem_key(k: Any) -> bytes:
        return bytes(
            k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def name(common: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "walkit sandbox"),
                x509.NameAttribute(NameOID.COMMON_NAME, common),
            ]
        )

    ca_key = key()
    ca_name = name("walkit sandbox CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, usage: Any, names: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        k = key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca_name)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(k)

    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for address in {host, "127.0.0.1"}:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    bookie_cert, bookie_key = leaf("walkit-bookie", ExtendedKeyUsageOID.SERVER_AUTH, names)
    client_cert, client_key = leaf("walkit-client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    _write(paths.ca, ca.public_bytes(serialization.Encoding.PEM))
    _write(paths.bookie_cert, bookie_cert)
    _write(paths.bookie_key, bookie_key)
    _write(paths.client_cert, client_cert)
    _write(paths.client_key, client_key)
    _write(host_file, host.encode())
    return paths

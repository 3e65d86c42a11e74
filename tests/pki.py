"""Certificates for TLS tests, made by the test itself (``cryptography``): a CA, a server
certificate for 127.0.0.1/localhost, a client certificate it signed, and a client certificate
from another CA, with keys in PKCS#8 (what the server takes) and one in PKCS#1."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool = False, server: bool = False,
          client: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False,
                                          encipher_only=False, decipher_only=False), critical=True)
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                            critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write_key(path: Path, key, fmt=serialization.PrivateFormat.PKCS8) -> str:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()))
    path.chmod(0o600)
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


@dataclass
class Pki:
    ca_cert: str
    server_cert: str
    server_key: str
    server_key_pkcs1: str
    client_cert: str
    client_key: str
    other_client_cert: str
    other_client_key: str

    def client_context(self, cert: bool = True, other_ca: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_cert)
        if cert:
            if other_ca:
                ctx.load_cert_chain(self.other_client_cert, self.other_client_key)
            else:
                ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def make_pki(folder: Path) -> Pki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("cddlm test CA", ca_key, "cddlm test CA", ca_key, ca=True)
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server = _cert("127.0.0.1", server_key, "cddlm test CA", ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("portal-b", client_key, "cddlm test CA", ca_key, client=True)
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("intruder", other_key, "another CA", other_ca_key, client=True)
    return Pki(
        ca_cert=_write_cert(folder / "ca.pem", ca),
        server_cert=_write_cert(folder / "server.pem", server),
        server_key=_write_key(folder / "server.key", server_key),
        server_key_pkcs1=_write_key(folder / "server-rsa.key", server_key,
                                    serialization.PrivateFormat.TraditionalOpenSSL),
        client_cert=_write_cert(folder / "client.pem", client),
        client_key=_write_key(folder / "client.key", client_key),
        other_client_cert=_write_cert(folder / "other.pem", other),
        other_client_key=_write_key(folder / "other.key", other_key))

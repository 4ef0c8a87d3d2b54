"""Keys and certificates made for the signing tests (P-256, as
`model_signing` signs with), written as PEM files."""

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def keys(tmp_path, name):
    """`(private PEM path, public PEM path, key)` of a new P-256 key."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = tmp_path / f"{name}.key"
    public = tmp_path / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM,
            serialization.PublicFormat.SubjectPublicKeyInfo,
        )
    )
    return str(private), str(public), key


def certificate(tmp_path, name, key, issuer_key, issuer=None, ca=False):
    """A certificate of `key`, issued by `issuer_key` (`issuer`: its
    name; `None`: self-signed), as a PEM file."""
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(*[False] * 5, True, True, False, False), True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, *[False] * 8), True
        ).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    path = tmp_path / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path), subject

"""Signed models: OpenSSF's `model_signing` over a model folder or file,
so that a server refuses what was changed after it was signed.

`sign(path, private_key)` writes a signature (a Sigstore bundle holding
the digest of every file, signed with an elliptic-curve key, or a key
and its certificate) to `model.sig` inside a folder, or to `FILE.sig`
beside a file. `Verifier(pem)` checks one against a public key, or
against a chain of certificates, before anything of the model is read:
`keras_attn_runtime.open(path, verify=Verifier(...))`, the Beam
handlers' `verify=`, and `keras-attn serve --require-signature`.

An unsigned model, one signed by another key, and one whose files
changed after signing (a file changed, added or removed) are each a
`SignatureRefused`, one line naming the model and the file.

Only `model_signing` is needed (`pip install 'keras_attn_runtime
[signing]'`), never TensorFlow.
"""

import os
import re

SIGNATURE = "model.sig"
INSTALL = "pip install 'keras_attn_runtime[signing]'"


class SignatureRefused(ValueError):
    """A model whose signature is missing, not by the key asked for, or
    not of its files as they are now; the message names the file."""


def signature_of(path):
    """Where the signature of the model at `path` is: `model.sig` inside
    a folder, `FILE.sig` beside a file."""
    if os.path.isdir(path):
        return os.path.join(path, SIGNATURE)
    return f"{path}.sig"


def signed_unit(path):
    """`(what was signed, its signature)` for `path`: the path itself,
    or, for a file without a signature of its own, the folder it is in
    when that folder is signed (a shipped model's folder)."""
    own = signature_of(path)
    if os.path.isfile(path) and not os.path.exists(own):
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isfile(os.path.join(folder, SIGNATURE)):
            return folder, os.path.join(folder, SIGNATURE)
    return path, own


def _library():
    try:
        import model_signing.hashing
        import model_signing.signing
        import model_signing.verifying
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"Signing and verifying models needs model_signing: {INSTALL} "
            f"({err})",
            name=err.name,
        ) from None
    return model_signing


def _hashing(library, *ignored):
    return library.hashing.Config().set_ignored_paths(
        paths=list(ignored), ignore_git_paths=True
    )


def _read_pem(pem, flag):
    try:
        with open(pem, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(
            f"Could not read {flag}={pem!r}: {err.__class__.__name__}"
        ) from None
    if "-----BEGIN" not in text:
        raise ValueError(
            f"Expected {flag} to be a PEM file (a public key or "
            f"certificates). Received: {flag}={pem!r}"
        )
    return text


def is_signature(path):
    """Whether the file at `path` is a signature `sign` writes (a
    Sigstore bundle), not some other file of the user's."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            bundle = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    kind = bundle.get("mediaType", "") if isinstance(bundle, dict) else ""
    return kind.startswith("application/vnd.dev.sigstore.bundle")


def check_signer(signing, names=None, targets=(), overwrite=False):
    """The PEM files of `signing` (`sign`'s `private_key`, `certificate`
    and `certificate_chain`) readable, before any work that would sign;
    a `ValueError` naming the argument (`names`: the CLI's flags)
    otherwise. `targets`: the files about to be written and signed; a
    file where one's signature goes that is not a signature is replaced
    only with `overwrite`."""
    for target in targets:
        found = signature_of(target)
        if os.path.lexists(found) and not overwrite and not is_signature(found):
            raise ValueError(
                f"{found} is not a signature, and signing {target} would "
                "replace it: pass overwrite=True (--overwrite) to replace "
                f"it. Received: {found!r}"
            )
    names = {
        "private_key": "private_key",
        "certificate": "certificate",
        "certificate_chain": "certificate_chain",
        **(names or {}),
    }
    unknown = set(signing) - set(names)
    if unknown or "private_key" not in signing:
        raise ValueError(
            "Expected signing to hold private_key, and optionally "
            f"certificate and certificate_chain. Received: {sorted(signing)}"
        )
    _library()
    _read_pem(signing["private_key"], names["private_key"])
    if signing.get("certificate") is not None:
        _read_pem(signing["certificate"], names["certificate"])
    for pem in signing.get("certificate_chain") or ():
        _read_pem(pem, names["certificate_chain"])


def sign(
    path,
    private_key,
    certificate=None,
    certificate_chain=(),
    password=None,
    overwrite=False,
):
    """Sign the model folder or file at `path` with `private_key` (a PEM
    file of an elliptic-curve key; with `certificate` and
    `certificate_chain`, the key's certificate and those that issued
    it). Returns the signature's path (`signature_of`); an existing one
    is replaced only with `overwrite`. Written whole, or not at all."""
    library = _library()
    if not os.path.exists(path):
        raise ValueError(f"Expected a model folder or file. Received: {path!r}")
    _read_pem(private_key, "private_key")
    target = signature_of(path)
    if os.path.exists(target) and not overwrite:
        raise ValueError(
            f"{target} exists: pass overwrite=True (--overwrite) to sign "
            f"again. Received: path={path!r}"
        )
    partial = f"{target}.partial"
    config = library.signing.Config()
    if certificate is None:
        config.use_elliptic_key_signer(
            private_key=private_key, password=password
        )
    else:
        config.use_certificate_signer(
            private_key=private_key,
            signing_certificate=certificate,
            certificate_chain=list(certificate_chain),
        )
    config.set_hashing_config(_hashing(library, target, partial))
    try:
        config.sign(path, partial)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


class Verifier:
    """Checks a model against its signature before it is read.

    Args:
        pem: a PEM file holding the public key the signature must be made
            with, or the chain of certificates (the root last) that must
            have issued its signing certificate.
        flag: how error messages name `pem` (the CLI's flag).
    """

    def __init__(self, pem, flag="pem"):
        text = _read_pem(pem, flag)
        self.pem, self.flag = pem, flag
        self.certificates = "BEGIN CERTIFICATE" in text
        _library()  # its absence is told now, not at the first model

    def __repr__(self):
        return f"Verifier({self.pem!r})"

    def __call__(self, path):
        """Nothing when `path` is as signed; else a `SignatureRefused`
        naming it and the file that does not match."""
        library = _library()
        if not os.path.exists(path):
            raise ValueError(
                f"Expected a model folder or file to verify. Received: {path!r}"
            )
        unit, signature = signed_unit(path)
        if not os.path.isfile(signature):
            raise SignatureRefused(
                f"Refused {path}: it is not signed (no {signature}); sign "
                f"it with `keras-attn sign`"
            )
        config = library.verifying.Config()
        if self.certificates:
            config.use_certificate_verifier(certificate_chain=[self.pem])
        else:
            config.use_elliptic_key_verifier(public_key=self.pem)
        config.set_hashing_config(_hashing(library, signature))
        try:
            config.verify(unit, signature)
        except Exception as err:  # noqa: BLE001 (the library's kinds vary)
            raise SignatureRefused(
                f"Refused {path}: {_why(str(err), unit, self)}"
            ) from None


def _why(message, unit, verifier):
    """One line of what `model_signing`'s `message` says is wrong."""
    # The library's message is a list's repr: a name's quotes may be
    # escaped (`\'`) when a digest holds a quote.
    changed = re.findall(r"Hash mismatch for \\?'([^'\\]+)\\?'", message)
    if changed:
        return f"{os.path.join(unit, changed[0])} changed after signing"
    for kind, what in (
        ("Extra", "was added after signing"),
        ("Missing", "was removed after signing"),
    ):
        pattern = (
            rf"{kind} files (?:found )?in model \\?'[^']*\\?': ([^\"'\]\\]+)"
        )
        found = re.search(pattern, message)
        if found:
            first = found.group(1).split(",")[0].strip()
            where = os.path.join(unit, first)
            return f"{where} {what}"
    if "Key mismatch" in message or "public key" in message.lower():
        return (
            f"its signature is not by the key in {verifier.flag}="
            f"{verifier.pem!r} (signed by another key)"
        )
    line = " ".join(message.split())
    return (
        f"its signature does not verify against {verifier.flag}="
        f"{verifier.pem!r}: {line[:300]}"
    )

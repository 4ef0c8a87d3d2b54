"""Signed models (`keras_attn_runtime.signing`): a signature written for a
folder and for a file, checked against a public key and against a
certificate chain; an unsigned model, a stranger's signature and every
kind of change after signing refused in one line naming the file,
before the opener or a Beam handler reads anything; and none of it
importing TensorFlow."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("model_signing")

from keras_attn_runtime import signing  # noqa: E402
from tests.keys import certificate, keys  # noqa: E402

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "saved_models")
EDGE = os.path.join(SHIPPED, "imdb_edge", "model_full_int8.tflite")


def model_folder(tmp_path):
    folder = tmp_path / "model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.data").write_bytes(b"weights")
    return folder


def refused(check, path):
    with pytest.raises(signing.SignatureRefused) as err:
        check(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"Refused {path}")
    return message


def test_a_signed_folder_passes_and_every_change_after_signing_is_named(
    tmp_path,
):
    private, public, _ = keys(tmp_path, "signer")
    folder = model_folder(tmp_path)
    assert signing.sign(str(folder), private) == str(folder / "model.sig")
    check = signing.Verifier(public, flag="--require-signature")
    check(str(folder))
    check(str(folder / "saved_model.pb"))  # a file of a signed folder
    weights = folder / "variables" / "variables.data"
    weights.write_bytes(b"swapped")
    assert refused(check, str(folder)).endswith(
        f"{weights} changed after signing"
    )
    weights.write_bytes(b"weights")
    (folder / "extra.bin").write_bytes(b"x")
    assert "extra.bin was added after signing" in refused(check, str(folder))
    os.remove(folder / "extra.bin")
    os.remove(weights)
    assert "variables.data was removed after signing" in refused(
        check, str(folder)
    )


def test_a_strangers_signature_and_no_signature_are_refused(tmp_path):
    private, public, _ = keys(tmp_path, "signer")
    stranger, _, _ = keys(tmp_path, "stranger")
    folder = model_folder(tmp_path)
    check = signing.Verifier(public, flag="--require-signature")
    assert "it is not signed" in refused(check, str(folder))
    signing.sign(str(folder), stranger)
    message = refused(check, str(folder))
    assert "not by the key in --require-signature=" in message
    # Signing again replaces a signature only when asked to.
    with pytest.raises(ValueError, match="--overwrite"):
        signing.sign(str(folder), private)
    signing.sign(str(folder), private, overwrite=True)
    check(str(folder))


def test_a_file_is_signed_beside_itself(tmp_path):
    private, public, _ = keys(tmp_path, "signer")
    model = tmp_path / "model.tflite"
    model.write_bytes(open(EDGE, "rb").read())
    assert signing.sign(str(model), private) == f"{model}.sig"
    check = signing.Verifier(public)
    check(str(model))
    with open(model, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    assert "changed after signing" in refused(check, str(model))


def test_a_certificate_chain_verifies_its_signers_and_no_others(tmp_path):
    private, _, key = keys(tmp_path, "signer")
    _, _, root_key = keys(tmp_path, "root")
    root, root_name = certificate(tmp_path, "root", root_key, root_key, ca=True)
    leaf, _ = certificate(tmp_path, "leaf", key, root_key, issuer=root_name)
    _, _, other_key = keys(tmp_path, "other")
    other, _ = certificate(tmp_path, "other", other_key, other_key, ca=True)
    folder = model_folder(tmp_path)
    signing.sign(
        str(folder), private, certificate=leaf, certificate_chain=[root]
    )
    signing.Verifier(root)(str(folder))
    message = refused(signing.Verifier(other, "--require-signature"), folder)
    assert "does not verify against --require-signature=" in message


def test_bad_key_files_name_their_argument(tmp_path):
    (tmp_path / "notes.txt").write_text("not a key")
    with pytest.raises(ValueError, match="--require-signature=.*notes.txt"):
        signing.Verifier(str(tmp_path / "notes.txt"), "--require-signature")
    with pytest.raises(ValueError, match="Could not read --sign-private-key"):
        signing.check_signer(
            {"private_key": str(tmp_path / "missing.pem")},
            {"private_key": "--sign-private-key"},
        )


def test_the_opener_and_a_beam_handler_refuse_before_reading(
    tmp_path, monkeypatch
):
    from keras_attn_runtime import opener

    private, public, _ = keys(tmp_path, "signer")
    folder = tmp_path / "edge"
    folder.mkdir()
    model = folder / "model.tflite"
    model.write_bytes(open(EDGE, "rb").read())
    signing.sign(str(folder), private)
    check = signing.Verifier(public)
    assert opener.open(str(folder), verify=check).kind == "litert"
    model.write_bytes(model.read_bytes() + b"\0")
    read = []
    monkeypatch.setattr(opener, "open_litert", lambda *a: read.append(a))
    refused(lambda p: opener.open(p, verify=check), str(folder))
    assert read == []  # nothing of it was read
    pytest.importorskip("apache_beam")
    from keras_attn_runtime.beam import LiteRTClassifierHandler

    handler = LiteRTClassifierHandler(str(model), verify=check)
    with pytest.raises(signing.SignatureRefused, match="changed after"):
        handler.load_model()


def test_verifying_imports_no_tensorflow(tmp_path):
    private, public, _ = keys(tmp_path, "signer")
    folder = model_folder(tmp_path)
    signing.sign(str(folder), private)
    code = (
        "import sys\n"
        "from keras_attn_runtime.signing import Verifier\n"
        f"Verifier({public!r})({str(folder)!r})\n"
        "heavy = {'tensorflow', 'keras', 'jax', 'torch'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_signing_an_export_keeps_a_file_of_the_users_where_its_signature_goes(
    tmp_path,
):
    """An export that signs wrote `FILE.sig` over whatever was there; a
    file that is not a signature is now kept (and the export refused
    before any work) unless overwrite, and an earlier signature is
    replaced."""
    pytest.importorskip("keras")
    from keras_attn.export import check_text_export

    private, _, _ = keys(tmp_path, "signer")
    target = tmp_path / "model.tflite"
    notes = tmp_path / "model.tflite.sig"
    notes.write_text("my notes")
    signer = {"private_key": private}
    with pytest.raises(ValueError, match="model.tflite.sig is not a signature"):
        check_text_export(tflite=str(target), signing=signer)
    assert notes.read_text() == "my notes"
    check_text_export(tflite=str(target), signing=signer, overwrite=True)
    notes.unlink()
    target.write_bytes(open(EDGE, "rb").read())  # an earlier export
    assert signing.sign(str(target), private) == str(notes)
    assert signing.is_signature(str(notes))
    check_text_export(tflite=str(target), signing=signer)  # its own: fine

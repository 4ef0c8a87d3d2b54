"""Text models (raw strings in): split into vectorizer and model,
exported as LiteRT with the vocabulary inside, as a SavedModel, as ONNX,
and checked against Keras."""

import json
import os

import numpy as np

from keras_attn.export import logs
from keras_attn.export import onnx as onnx_format
from keras_attn.export import saved_model as saved_model_module
from keras_attn.export.destination import (
    check_destination,
    is_within,
    staged,
)
from keras_attn.export.litert import (
    QUANTIZATIONS,
    convert_tflite,
    length_axes,
    with_metadata,
)
from keras_attn.legacy import exports as legacy_exports
from keras_attn_runtime import artifact


def split_text_model(text_model):
    """`(vectorizer, token_model)` of a raw-text model built as
    `Input(string) → TextVectorization → token model` (the examples')."""
    import keras

    vectorizers = [
        layer
        for layer in text_model.layers
        if isinstance(layer, keras.layers.TextVectorization)
    ]
    inner = [
        layer for layer in text_model.layers if isinstance(layer, keras.Model)
    ]
    if len(vectorizers) != 1 or len(inner) != 1:
        raise ValueError(
            "Expected a model of one TextVectorization layer followed by one "
            f"token model. Received: model={text_model.name!r} with "
            f"{len(vectorizers)} vectorizers and {len(inner)} sub-models"
        )
    return vectorizers[0], inner[0]


def _text_settings(quantize, calibration_texts, names):
    """Check the LiteRT settings of a text export before any work."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"Expected {names['quantize']} to be one of {QUANTIZATIONS}. "
            f"Received: {names['quantize']}={quantize!r}"
        )
    if quantize == "int8":
        if calibration_texts is None or len(calibration_texts) == 0:
            raise ValueError(
                f"quantize='int8' needs calibration texts ("
                f"{names['calibration_texts']}). Received: "
                f"{names['calibration_texts']}={calibration_texts!r}"
            )


_API_NAMES = {
    "quantize": "quantize",
    "calibration_texts": "calibration_texts",
    "dynamic_length": "dynamic_length",
    "saved_model": "saved_model",
    "tflite": "tflite",
    "onnx": "onnx",
}


def _text_tflite_bytes(
    text_model,
    quantize,
    calibration_texts,
    batch_size,
    dynamic_length,
    verbose=False,
):
    vectorizer, token_model = split_text_model(text_model)
    representative = None
    if quantize == "int8":
        representative = np.asarray(
            vectorizer(np.asarray(list(calibration_texts), dtype=object))
        )
    data = convert_tflite(
        token_model,
        quantize=quantize,
        representative_data=representative,
        batch_size=batch_size,
        dynamic_length=dynamic_length,
        verbose=verbose,
    )
    vocabulary = "\n".join(vectorizer.get_vocabulary()) + "\n"
    settings = (
        {"length_axes": length_axes(token_model)} if dynamic_length else {}
    )
    config = artifact.artifact_config(
        artifact.TEXT_CLASSIFIER,
        max_length=int(token_model.inputs[0].shape[1]),
        quantize=quantize,
        **settings,
    )
    return with_metadata(
        data,
        {
            artifact.METADATA_VOCABULARY: vocabulary.encode("utf-8"),
            artifact.METADATA_CONFIG: json.dumps(config).encode("utf-8"),
        },
    )


@legacy_exports.options_by_position(
    "quantize",
    "calibration_texts",
    "batch_size",
    "dynamic_length",
    "overwrite",
    "protect",
    "verbose",
)
def export_text_tflite(
    text_model,
    path,
    *,
    quantize="none",
    calibration_texts=None,
    batch_size=1,
    dynamic_length=False,
    overwrite=False,
    protect=(),
    verbose=False,
):
    """LiteRT model for a raw-text model, its vocabulary embedded.

    The `TextVectorization` step stays outside the graph (strings are not
    builtin LiteRT tensors); its vocabulary and the model's length travel
    inside the flatbuffer as metadata (`keras_attn.vocabulary`,
    `keras_attn.config`), so a model can never be paired with another
    model's vocabulary. `keras_attn_runtime` tokenizes the same
    way. `dynamic_length`: see `convert_tflite`; `verbose`: see
    `export_text_model`.
    """
    export_text_model(
        text_model,
        tflite=path,
        quantize=quantize,
        calibration_texts=calibration_texts,
        batch_size=batch_size,
        dynamic_length=dynamic_length,
        overwrite=overwrite,
        protect=protect,
        verbose=verbose,
    )
    return path


def export_onnx(text_model, path, *, overwrite=False, protect=()):
    """An ONNX text classifier for a raw-text model, its vocabulary
    inside: the token model through Keras's `export(format="onnx")`
    (int32 token ids in, float32 out), the vocabulary and the length in
    its `metadata_props` (`keras_attn.vocabulary`, `keras_attn.config`),
    which `keras_attn_runtime.OnnxClassifier` reads. The same file as
    `export_text_model(text_model, onnx=path)`; `overwrite` and
    `protect` as there. Returns `path`."""
    export_text_model(
        text_model, onnx=path, overwrite=overwrite, protect=protect
    )
    return path


def check_text_export(
    saved_model=None,
    tflite=None,
    quantize="none",
    calibration_texts=None,
    dynamic_length=False,
    overwrite=False,
    protect=(),
    names=None,
    onnx=None,
    signing=None,
):
    """Every check of `export_text_model` that needs no model: settings,
    destinations and the signing keys (with nothing but an earlier
    signature where a file's goes). Returns `{kind: absolute path}`."""
    names = {**_API_NAMES, **(names or {})}
    if saved_model is None and tflite is None and onnx is None:
        raise ValueError(
            f"Nothing to export: give {names['saved_model']}, "
            f"{names['tflite']} and/or {names['onnx']}. Received: none"
        )
    targets = {}
    if saved_model is not None:
        targets["saved_model"] = check_destination(
            saved_model,
            "saved_model",
            overwrite,
            protect,
            names["saved_model"],
        )
    if tflite is not None:
        _text_settings(quantize, calibration_texts, names)
        targets["tflite"] = check_destination(
            tflite, "tflite", overwrite, protect, names["tflite"]
        )
    if onnx is not None:
        targets["onnx"] = check_destination(
            onnx, "onnx", overwrite, protect, names["onnx"]
        )
    files = [targets[k] for k in ("tflite", "onnx") if k in targets]
    folder = targets.get("saved_model")
    if len(set(targets.values())) < len(targets) or (
        folder
        and any(
            is_within(os.path.realpath(f), os.path.realpath(folder))
            for f in files
        )
    ):
        given = ", ".join(
            f"{names[k]}={v!r}"
            for k, v in (
                ("saved_model", saved_model),
                ("tflite", tflite),
                ("onnx", onnx),
            )
            if v is not None
        )
        raise ValueError(
            "The export destinations must not overlap. Received: " + given
        )
    _signer_checked(signing, names, targets, overwrite)
    return targets


def export_text_model(
    text_model,
    saved_model=None,
    tflite=None,
    quantize="none",
    calibration_texts=None,
    batch_size=1,
    dynamic_length=False,
    overwrite=False,
    protect=(),
    names=None,
    onnx=None,
    verbose=False,
    signing=None,
):
    """SavedModel, LiteRT and/or ONNX export of a raw-text model, all or
    nothing.

    Every setting and destination is checked before any work, both
    artifacts are built in temporary folders, and only then moved into
    place together; on any error nothing is written or replaced.

    Args:
        text_model: `Input(string) → TextVectorization → token model`.
        saved_model: the SavedModel folder. Defaults to `None`.
        tflite: the `.tflite` file. Defaults to `None`.
        quantize: as in `convert_tflite`.
        calibration_texts: as in `convert_tflite`.
        batch_size: as in `convert_tflite`.
        dynamic_length: as in `convert_tflite`.
        overwrite: replace destinations that are not earlier artifacts of
            their kind. Defaults to `False`.
        protect: paths never to replace. Defaults to `()`.
        names: argument names to use in error messages (the CLI passes
            its flags). Defaults to the Python argument names.
        onnx: the `.onnx` file: the token model through Keras's
            `export(format="onnx")` (int32 token ids in, float32 out; ONNX
            has no string ops), with the vocabulary and the length in its
            `metadata_props`. Defaults to `None`.
        verbose: a Keras progress bar over the `"int8"` calibration texts.
            Defaults to `False`.
        signing: sign each artifact written (`keras_attn_runtime.
            signing.sign`: `model.sig` inside the SavedModel, `FILE.sig`
            beside a file) with `{"private_key": PEM, "certificate": PEM,
            "certificate_chain": [PEM, ...]}` (the certificates
            optional); the files are checked before any work. Defaults
            to `None` (not signed).

    Returns:
        `{"saved_model": path, "tflite": path, "onnx": path}` for what was
        written.
    """
    targets = check_text_export(
        saved_model,
        tflite,
        quantize,
        calibration_texts,
        dynamic_length,
        overwrite,
        protect,
        names,
        onnx,
        signing,
    )
    split_text_model(text_model)  # the model has the expected shape
    with logs.quiet():
        written = _write_text_model(
            text_model,
            targets,
            quantize,
            calibration_texts,
            batch_size,
            dynamic_length,
            {"saved_model": saved_model, "tflite": tflite, "onnx": onnx},
            verbose,
        )
    return _signed(written, signing)


def _signer_checked(signing, names, targets, overwrite):
    """`signing`'s key files readable, and nothing but an earlier
    signature where a file target's goes (a SavedModel's is inside its
    folder, replaced with it), before any work (or nothing to check)."""
    if signing is not None:
        from keras_attn_runtime.signing import check_signer

        files = [p for kind, p in targets.items() if kind != "saved_model"]
        check_signer(signing, names and names.get("signing"), files, overwrite)


def _signed(written, signing):
    """Each of `written` (`{kind: path}`) signed with `signing` (`None`:
    left unsigned); `written` back."""
    if signing is not None:
        from keras_attn_runtime.signing import sign

        for path in written.values():
            sign(path, **signing, overwrite=True)
    return written


def _write_text_model(
    text_model,
    targets,
    quantize,
    calibration_texts,
    batch_size,
    dynamic_length,
    given,
    verbose=False,
):
    """`export_text_model`'s conversions and writes, once checked."""
    tflite, onnx = given["tflite"], given["onnx"]
    data = None
    if tflite is not None:
        data = _text_tflite_bytes(
            text_model,
            quantize,
            calibration_texts,
            batch_size,
            dynamic_length,
            verbose,
        )
    onnx_data = None
    if onnx is not None:
        onnx_data = onnx_format.text_classifier_bytes(
            *split_text_model(text_model)
        )
    kinds = list(targets)
    with staged(*targets.values()) as tmps:
        for kind, tmp in zip(kinds, tmps, strict=True):
            if kind == "saved_model":
                saved_model_module.write_saved_model(
                    text_model,
                    tmp,
                    vectorizer=split_text_model(text_model)[0],
                )
            else:
                with open(tmp, "wb") as f:
                    f.write(data if kind == "tflite" else onnx_data)
    return {k: v for k, v in given.items() if v is not None}

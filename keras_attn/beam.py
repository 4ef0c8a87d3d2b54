"""Apache Beam's `RunInference` over keras_attn's SavedModels: the IMDB
classifiers' and the translator's, loaded with `tf.saved_model.load`
(through the op allowlist, `keras_attn.loading.opener`), called through their
signatures. Neither tensorflow-hub nor tf-keras is needed: Beam's stock
`TFModelHandlerTensor` asks for the first and loads with
`tf.keras.models.load_model`, which refuses a SavedModel under Keras 3
(docs/batch_inference.md says more).

The handlers share `keras_attn_runtime.beam.TextModelHandler` with the
LiteRT ones: strings in, one `PredictionResult` an element, batch hints,
bytes and the `keras_attn` metrics namespace.

    from keras_attn.beam import SavedModelTranslatorHandler
    handler = SavedModelTranslatorHandler("saved_models/translation_en_fr")
"""

import numpy as np

from keras_attn_runtime.beam import TextModelHandler, classifier_outputs
from keras_attn_runtime.signature import DEFAULT_SIGNATURE


def _strings(texts):
    return np.array([t.encode("utf-8") for t in texts], dtype=object)


def _open_saved_model(path, allow_unsafe):
    """The SavedModel at `path` (its folder, or a model folder holding it
    in `saved_model/`, as `saved_models/imdb_ssa`), opened as every model
    is (`keras_attn.loading.opener.open`, the op allowlist checked unless
    `allow_unsafe`); a `ValueError` naming `model_path` otherwise."""
    from keras_attn.loading import opener

    model = opener.open(
        path, allow_unsafe=allow_unsafe, flag="model_path", prefer="saved_model"
    )
    if model.kind != "saved_model":
        raise ValueError(
            "Expected a SavedModel folder, or a folder holding one. "
            f"Received: model_path={path!r}, a {model.kind} model"
        )
    return model


class SavedModelClassifierHandler(TextModelHandler):
    """`RunInference` with a text classifier SavedModel (its
    `serving_default`: raw strings in, `probability` and `attention`
    out): a probability a text, or with `attention=True` a dict with its
    attention too. A batch is one signature call.

    Args:
        model_path: the SavedModel folder, or a model folder holding it
            in `saved_model/`.
        attention: give each text's attention beside its probability.
            Defaults to `False`.
        allow_unsafe: load a SavedModel with ops outside the allowlist
            (only one you trust). Defaults to `False`.
        **kwargs: `keras_attn_runtime.beam.TextModelHandler`'s.
    """

    def __init__(
        self, model_path, *, attention=False, allow_unsafe=False, **kwargs
    ):
        super().__init__(model_path, **kwargs)
        self.attention, self.allow_unsafe = attention, allow_unsafe

    def load_model(self):
        self.check_signature()
        return _open_saved_model(self.model_path, self.allow_unsafe)

    def predict(self, model, texts):
        out = model.run(DEFAULT_SIGNATURE, {"text": _strings(texts)})
        return classifier_outputs(out, self.attention)


class SavedModelTranslatorHandler(TextModelHandler):
    """`RunInference` with a translator SavedModel (its `translate`
    signature: the beam search inside, long inputs cut into clauses): a
    translation a text. A batch is one call, padded to its longest
    sentence: `bucket_by_length=True` batches sentences of similar
    length together.

    Args:
        model_path: the SavedModel folder, or the translator's folder
            holding it in `saved_model/`.
        signature: `"translate"` (beam search) or `"translate_greedy"`.
            Defaults to `"translate"`.
        allow_unsafe: as for `SavedModelClassifierHandler`. Defaults to
            `False`.
        **kwargs: `keras_attn_runtime.beam.TextModelHandler`'s.
    """

    MAX_BATCH_SIZE = 32

    def __init__(
        self,
        model_path,
        *,
        signature="translate",
        allow_unsafe=False,
        **kwargs,
    ):
        super().__init__(model_path, **kwargs)
        self.signature, self.allow_unsafe = signature, allow_unsafe

    def load_model(self):
        self.check_signature()
        model = _open_saved_model(self.model_path, self.allow_unsafe)
        path = model.path
        if self.signature not in model.signatures:
            raise ValueError(
                f"Expected a translator SavedModel with a {self.signature!r} "
                f"signature. Received: {path!r} with "
                f"{sorted(model.signatures)}"
            )
        return model

    def predict(self, model, texts):
        out = model.run(self.signature, {"text": _strings(texts)})
        return [
            t.decode("utf-8") if isinstance(t, bytes) else str(t)
            for t in np.asarray(out["translation"]).reshape(-1)
        ]

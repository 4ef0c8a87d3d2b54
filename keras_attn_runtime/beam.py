"""Apache Beam's `RunInference` over keras_attn's models: text in, one
`PredictionResult` an element, on DirectRunner here and on Dataflow,
Flink or Spark by changing only the pipeline options.

`pip install 'keras-attn-runtime[beam]'` (or keras_attn's `[beam]`
extra). The LiteRT handlers here need neither TensorFlow nor Keras on a
worker; `keras_attn.beam` has the SavedModel ones, on the same base.

    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference
    from keras_attn_runtime.beam import LiteRTClassifierHandler

    with beam.Pipeline() as p:
        (p | beam.Create(["A wonderful film."])
           | RunInference(LiteRTClassifierHandler("model_full_int8.tflite"))
           | beam.Map(print))

Each handler builds its model in `load_model`, on the worker (a reader
is never pickled: Beam ships the handler, which holds only a path and
settings), gives Beam batch-size hints fit to the model, the bytes of a
batch (`get_num_bytes`) and a metrics namespace (`keras_attn`). An
element is a `str` (or UTF-8 `bytes`), checked alone before batching
(`check_element`: with `.with_exception_handling()` a bad element goes
to the dead letters by itself); its result's `inference` is a
probability (a `float`; with `attention=True` a dict of the probability
and the `(hops, tokens)` attention), or a translation or completion (a
`str`).
"""

import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

NAMESPACE = "keras_attn"


def word_count(text):
    """An element's length for Beam's length buckets: its words."""
    return len(_text(text).split())


def _text(element):
    if isinstance(element, bytes):
        return element.decode("utf-8")
    if not isinstance(element, str):
        raise TypeError(
            "Expected each element to be a text (str or UTF-8 bytes). "
            f"Received: {type(element).__name__} {element!r:.80}"
        )
    return element


def check_element(element):
    """`element` if a handler can run it, else the error that sends it
    alone to the dead letters: not a text (`TypeError`), not UTF-8, or
    empty or blank (`ValueError`). Every handler runs it on each element
    before Beam batches them (`get_preprocess_fns`)."""
    try:
        text = _text(element)
    except UnicodeDecodeError as err:
        raise ValueError(
            f"Expected UTF-8 bytes. Received: {element!r:.80} ({err})"
        ) from None
    if not text.strip():
        raise ValueError(
            f"Expected a non-empty text. Received: {element!r:.80}"
        )
    return element


class WindowCheck:
    """A preprocessing step of the handlers whose model has a window
    (`LiteRTTranslatorHandler`, `BundleGeneratorHandler`): `element` back
    if it fits the model's window (`LiteRTTranslator.check_window`,
    `BundleGenerator.check_prompt`), else the `PromptTooLong` naming the
    count. The model is opened once a worker, on first use (pickled
    as its path and kind)."""

    def __init__(self, model_path, kind="translator"):
        self.model_path, self.kind, self._model = model_path, kind, None

    def __getstate__(self):
        return {**self.__dict__, "_model": None}

    def __call__(self, element):
        text = _text(element)
        if self.kind == "generator":
            if self._model is None:
                from keras_attn_runtime.generator import BundleGenerator

                self._model = BundleGenerator(self.model_path, loops=1)
            self._model.check_prompt(text)
            return element
        if self._model is None:
            from keras_attn_runtime.translator import LiteRTTranslator

            self._model = LiteRTTranslator(self.model_path)
        self._model.check_window(text)
        return element


class TextModelHandler(ModelHandler):
    """The part every keras_attn handler shares: strings in, one result
    each, batch hints, bytes and namespace. A subclass gives
    `load_model()` and `predict(model, texts) -> [inference, ...]`.

    Args:
        model_path: the model's file or folder, opened on the worker.
        min_batch_size: Beam's smallest batch. Defaults to `1`.
        max_batch_size: Beam's largest batch. Defaults to the class's
            `MAX_BATCH_SIZE` (what one call of the model takes well).
        bucket_by_length: batch texts of similar word counts together
            (Beam's `batch_length_fn`, with `max_batch_duration_secs`,
            which Beam needs for it to act). Defaults to `False`.
        max_batch_duration_secs: the longest a batch waits to fill.
            Defaults to `None` (`1` with `bucket_by_length`).
        verify: a `keras_attn_runtime.signing.Verifier` the model must
            pass on each worker before it is read (its PEM file at the
            same path there). Defaults to `None` (not checked).
        **kwargs: Beam's other `ModelHandler` arguments (`model_copies`,
            `large_model`, `env_vars`, ...).
    """

    MAX_BATCH_SIZE = 64

    def __init__(
        self,
        model_path,
        *,
        min_batch_size=1,
        max_batch_size=None,
        bucket_by_length=False,
        max_batch_duration_secs=None,
        verify=None,
        **kwargs,
    ):
        if not isinstance(model_path, str) or not model_path:
            raise ValueError(
                "Expected model_path to be a non-empty path. Received: "
                f"model_path={model_path!r}"
            )
        if bucket_by_length and max_batch_duration_secs is None:
            max_batch_duration_secs = 1
        super().__init__(
            min_batch_size=min_batch_size,
            max_batch_size=max_batch_size or self.MAX_BATCH_SIZE,
            max_batch_duration_secs=max_batch_duration_secs,
            batch_length_fn=word_count if bucket_by_length else None,
            **kwargs,
        )
        self.model_path = model_path
        self.bucket_by_length = bucket_by_length
        self.verify = verify

    def load_model(self):
        raise NotImplementedError

    def check_signature(self):
        """`verify(model_path)` on the worker, before the model is read
        (a `keras_attn_runtime.signing.SignatureRefused` fails the
        load)."""
        if self.verify is not None:
            self.verify(self.model_path)

    def predict(self, model, texts):
        raise NotImplementedError

    def get_preprocess_fns(self):
        """Each element checked alone before batching (`check_element`):
        with `RunInference(...).with_exception_handling()`, a bad element
        reaches the dead letters (`failed_preprocessing[0]`) by itself
        and its would-be batch-mates are answered."""
        return [check_element, *super().get_preprocess_fns()]

    def run_inference(self, batch, model, inference_args=None):
        texts = [_text(element) for element in batch]
        outputs = self.predict(model, texts)
        return [
            PredictionResult(element, output, self.model_path)
            for element, output in zip(batch, outputs, strict=True)
        ]

    def get_num_bytes(self, batch):
        return sum(len(_text(element).encode("utf-8")) for element in batch)

    def get_metrics_namespace(self):
        return NAMESPACE

    def validate_inference_args(self, inference_args):
        if inference_args:
            raise ValueError(
                "keras_attn's handlers take their settings when they are "
                "made, not as inference_args. Received: inference_args="
                f"{inference_args!r}"
            )


def classifier_outputs(out, attention=False):
    """One inference a text from a classifier's batch outputs: its
    probability, or with `attention` a dict of it and its attention."""
    probabilities = np.asarray(out["probability"], "float32").reshape(-1)
    if not attention:
        return [float(p) for p in probabilities]
    maps = np.asarray(out["attention"], "float32")
    return [
        {"probability": float(p), "attention": a}
        for p, a in zip(probabilities, maps, strict=True)
    ]


class LiteRTHandler(TextModelHandler):
    """What the LiteRT handlers share: the reader's CPU settings, and the
    reader (`reader()`: its class, imported on the worker) built in
    `load_model`."""

    def __init__(
        self, model_path, *, num_threads=1, cpu_kernels="auto", **kwargs
    ):
        super().__init__(model_path, **kwargs)
        self.num_threads, self.cpu_kernels = num_threads, cpu_kernels

    def reader(self):
        raise NotImplementedError

    def load_model(self):
        self.check_signature()
        return self.reader()(
            self.model_path,
            num_threads=self.num_threads,
            cpu_kernels=self.cpu_kernels,
        )


class LiteRTClassifierHandler(LiteRTHandler):
    """`RunInference` with a LiteRT text classifier
    (`keras_attn_runtime.LiteRTClassifier`): a probability a text, or
    with `attention=True` a dict with its attention too.

    The reader runs one row a call (the same numbers whatever the batch),
    so Beam's batches only save per-call overhead: the default
    `max_batch_size` is 64.

    Args:
        model_path: the `.tflite` file.
        attention: give each text's attention beside its probability.
            Defaults to `False`.
        **kwargs: `LiteRTHandler`'s: `num_threads`, LiteRT's CPU
            threads a worker (default `1`: one worker a core), and
            `cpu_kernels`, `"auto"`, `"builtin"` or `"xnnpack"` (see
            `keras_attn_runtime.engine.LiteRTModel`; default `"auto"`);
            and `TextModelHandler`'s.
    """

    def __init__(self, model_path, *, attention=False, **kwargs):
        super().__init__(model_path, **kwargs)
        self.attention = attention

    def reader(self):
        from keras_attn_runtime.classifier import LiteRTClassifier

        return LiteRTClassifier

    def predict(self, model, texts):
        return classifier_outputs(model.predict(texts), self.attention)


class LiteRTTranslatorHandler(LiteRTHandler):
    """`RunInference` with a LiteRT translator
    (`keras_attn_runtime.LiteRTTranslator`): a translation a text, the
    file's one answer (`LiteRTTranslator.answer`, as the server and
    `keras-attn translate` give it), a sentence at a time.

    Args:
        model_path: the `.tflite` file.
        num_threads: LiteRT's CPU threads a worker. Defaults to `1`.
        cpu_kernels: as for `LiteRTClassifierHandler`. Defaults to
            `"auto"`.
        **kwargs: `TextModelHandler`'s.
    """

    MAX_BATCH_SIZE = 16

    def reader(self):
        from keras_attn_runtime.translator import LiteRTTranslator

        return LiteRTTranslator

    def get_preprocess_fns(self):
        """`TextModelHandler`'s checks, then the file's window on each
        element alone (`WindowCheck`): a text past it reaches the dead
        letters by itself, not with its batch."""
        check, *rest = super().get_preprocess_fns()
        return [check, WindowCheck(self.model_path, "translator"), *rest]

    def predict(self, model, texts):
        return [model.answer(text) for text in texts]


class BundleGeneratorHandler(TextModelHandler):
    """`RunInference` with a decoder-only model's folder (its `.litertlm`
    bundle beside `generation.json` and `tokenizer.json`, run by
    `keras_attn_runtime.generator.BundleGenerator` without TensorFlow): a
    completion a text, its greedy search, the answer `keras-attn serve`
    and `keras-attn translate` give. A text past the model's window
    reaches the dead letters alone (`WindowCheck`).

    Args:
        model_path: the decoder-only folder.
        loops: the bundle's copies a worker (one a core). Defaults to
            `1` (one worker a core).
        **kwargs: `TextModelHandler`'s.
    """

    MAX_BATCH_SIZE = 16

    def __init__(self, model_path, *, loops=1, **kwargs):
        super().__init__(model_path, **kwargs)
        self.loops = loops

    def load_model(self):
        from keras_attn_runtime.generator import (
            BundleGenerator,
            is_bundle_generator,
        )

        self.check_signature()
        if not is_bundle_generator(self.model_path):
            raise ValueError(
                "Expected a decoder-only folder with a .litertlm bundle. "
                f"Received: model_path={self.model_path!r}"
            )
        return BundleGenerator(self.model_path, loops=self.loops)

    def get_preprocess_fns(self):
        check, *rest = super().get_preprocess_fns()
        return [check, WindowCheck(self.model_path, "generator"), *rest]

    def predict(self, model, texts):
        return model.completions(texts)

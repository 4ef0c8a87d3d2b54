"""One way to open a model file: `open(path) -> Artifact`.

Every command, the server and the runtime's users find, classify and
load a model file here. The five kinds, and the order a folder is read
in (TensorFlow Serving's first):

1. a SavedModel: the folder itself, or its `saved_model/`;
2. a decoder-only folder's `.litertlm` bundle (beside its
   `generation.json` and `tokenizer.json`), run without TensorFlow
   (`keras_attn_runtime.generator`);
3. `model.keras`;
4. its one `.tflite` or `.onnx` file.

An artifact has `path`, `kind` (`"saved_model"`, `"litertlm"`,
`"keras"`, `"litert"`, `"onnx"`) and `signatures` (`{name:
keras_attn_runtime.signature.Signature}`), and runs one with `run(name,
inputs) -> {name: array}`. This runtime opens the bundles and the LiteRT
and ONNX files (NumPy, LiteRT,
onnxruntime) itself. It imports nothing above it: the kinds that need
TensorFlow and Keras (SavedModels, `.keras` files) open through loaders
registered from above (`register`; `keras_attn.loading.opener` registers its own
when imported, and the command line registers them lazily, so that a
LiteRT file never imports TensorFlow); without one, they are refused
with a clear message.
"""

import os
from typing import Protocol, runtime_checkable

import numpy as np

from keras_attn_runtime import generator
from keras_attn_runtime.artifact import (
    METADATA_CONFIG,
    STREAMING_DECODER,
    TRANSLATOR,
    config_object,
    format_of,
    load_verified,
    metadata,
)
from keras_attn_runtime.signature import (  # noqa: F401 (PromptTooLong)
    DEFAULT_SIGNATURE,
    PromptTooLong,
    Signature,
)

# Every kind `find` names, in the order a folder is read.
KINDS = ("saved_model", "litertlm", "keras", "litert", "onnx")
# The kinds this runtime does not open itself, and their loaders
# (`register`): `load(path, allow_unsafe) -> artifact`.
TENSORFLOW_KINDS = ("saved_model", "keras")
_LOADERS = {}


def register(kind, load):
    """Open `kind` (one of `TENSORFLOW_KINDS`) with `load(path,
    allow_unsafe) -> artifact` from now on: how a library above this
    runtime (keras_attn, with TensorFlow) adds the kinds it opens."""
    if kind not in TENSORFLOW_KINDS:
        raise ValueError(
            f"Expected kind to be one of {TENSORFLOW_KINDS}. Received: "
            f"kind={kind!r}"
        )
    _LOADERS[kind] = load


def registered():
    """The kinds a loader was registered for (`register`)."""
    return sorted(_LOADERS)


SUFFIXES = {
    ".keras": "keras",
    ".tflite": "litert",
    ".onnx": "onnx",
    ".litertlm": "litertlm",
}
TEXT = {"text": ("string", [None])}


class ModelError(RuntimeError):
    """The model failed on its inputs (the message says where)."""


@runtime_checkable
class StreamingArtifact(Protocol):
    """What an artifact that streams its answers offers (a translator
    file with streaming signatures, a decoder-only model's folder), as
    the server's OpenAI routes use it; `streams(artifact)` decides.

    - `stream(text, stop=None)`: the answer's pieces as they are decided,
      until `stop` (a `threading.Event`) is set.
    - `concurrent_streams`: whether every caller's text decodes in shared
      loops (the server then gives each stream a thread that waits),
      else the streams take turns on the model's executor.
    - `stream_capacity`: how many texts the loops hold at once, or
      `None` when it does not say.
    - `check_prompt(text)`: a `PromptTooLong` for a text past the model's
      window, before any decoding.
    - `sampling`: whether `stream` takes `sampling=` (`{"temperature",
      "top_k", "top_p", "seed"}`: a sampled answer), else it answers
      with its own search only.

    Optional: `stream_into(text, put, stop=None, ...)`, the pieces handed
    to `put` from the artifact's own threads, then `None` (or the
    failure); the server then gives a stream no thread.
    """

    concurrent_streams: bool
    stream_capacity: object
    sampling: bool

    def stream(self, text, stop=None): ...

    def check_prompt(self, text): ...


def streams(artifact):
    """Whether `artifact` streams its answers (`StreamingArtifact`)."""
    return isinstance(artifact, StreamingArtifact)


def is_saved_model(folder):
    return os.path.isfile(os.path.join(folder, "saved_model.pb"))


def find(path, prefer=None):
    """`(kind, path)` of the model file `path` names: a file by its
    suffix, a SavedModel folder, or a folder's file in the order above,
    or of kind `prefer` (one of `KINDS`) where the folder holds one.
    `None` when there is none (or a folder holds several `.tflite`/
    `.onnx` files and nothing before them)."""
    if prefer is not None and prefer not in KINDS:
        raise ValueError(
            f"Expected prefer to be one of {KINDS}. Received: prefer={prefer!r}"
        )
    if os.path.isfile(path):
        kind = SUFFIXES.get(os.path.splitext(path)[1])
        return None if kind is None else (kind, os.path.normpath(path))
    if not os.path.isdir(path):
        return None
    files = dict(_folder_files(path))
    for kind in ([prefer] if prefer in files else []) + list(KINDS):
        if kind in files:
            return kind, os.path.normpath(files[kind])
    return None


def kinds_in(path):
    """The kinds of model file the folder `path` holds, in `KINDS`'
    order (`[]` for a file): where several are, the first answers at
    every door unless `prefer` names another."""
    return (
        [kind for kind, _ in _folder_files(path)] if os.path.isdir(path) else []
    )


def _folder_files(path):
    """`(kind, file)` of each model file a folder holds, in `KINDS`'
    order (a `.tflite` or `.onnx` only when it is the folder's one)."""
    for candidate in (path, os.path.join(path, "saved_model")):
        if is_saved_model(candidate):
            yield "saved_model", candidate
            break
    if generator.is_bundle_generator(path):
        yield "litertlm", os.path.join(path, generator.BUNDLE)
    keras_file = os.path.join(path, "model.keras")
    if os.path.isfile(keras_file):
        yield "keras", keras_file
    files = sorted(
        f for f in os.listdir(path) if f.endswith((".tflite", ".onnx"))
    )
    if len(files) == 1:
        yield (
            SUFFIXES[os.path.splitext(files[0])[1]],
            os.path.join(path, files[0]),
        )


def found(path, flag="path", prefer=None):
    """`find(path, prefer)`, or a `ValueError` naming `flag` and `path`."""
    result = find(path, prefer)
    if result is None:
        raise ValueError(
            "Expected a SavedModel folder, a .keras, .tflite or .onnx file, "
            f"or a folder holding one. Received: {flag}={path!r}"
        )
    return result


def _outputs_of(probe):
    """Signature outputs from a one-row run: the batch size unknown."""
    return {k: (str(v.dtype), [None, *v.shape[1:]]) for k, v in probe.items()}


def _texts(inputs):
    return [t.decode("utf-8", "replace") for t in inputs["text"]]


class TextClassifierArtifact:
    """A text classifier over a runtime classifier (`predict(texts)`):
    one signature, `text` in."""

    def __init__(self, path, kind, classifier):
        self.path, self.kind, self.classifier = path, kind, classifier
        outputs = _outputs_of(classifier.predict([""]))
        self.signatures = {DEFAULT_SIGNATURE: Signature(TEXT, outputs)}

    def run(self, signature, inputs):
        texts = _texts(inputs)
        if not texts:
            return self.signatures[signature].empty_outputs()
        return self.classifier.predict(texts)


# Decode loops a served translator runs at most (one a core, each with
# its own copy of the file in memory).
MAX_LOOPS = 4


class TranslatorArtifact:
    """A LiteRT translator: `text` in, `translation` out, under TensorFlow
    Serving's default key and `translate`. A file with streaming
    signatures also has `stream(text, stop)`: its pieces as they are
    decoded, every caller's sentence in shared decode loops, one a core
    up to `MAX_LOOPS` (`LiteRTTranslator.batch_streams`;
    `concurrent_streams` is then true)."""

    kind = "litert"
    concurrent_streams = False
    sampling = False  # the file's own search (its beam) only

    def __init__(self, path, translator):
        self.path, self.translator = path, translator
        io = Signature(TEXT, {"translation": ("string", [None])})
        self.signatures = {DEFAULT_SIGNATURE: io, "translate": io}
        decoder = translator.decoder
        self.stream_capacity = None  # sentences decoded at once
        if decoder is not None and decoder.config.get("reads_index") is False:
            loops = translator.batch_streams(
                loops=min(os.cpu_count() or 1, MAX_LOOPS)
            )
            self.stream_capacity = loops.capacity
            self.stream, self.concurrent_streams = self._stream, True

    def check_prompt(self, text):
        """A `PromptTooLong` when a piece of `text` (a clause, for a file
        that cuts long inputs) has more tokens than the file reads
        (`LiteRTTranslator.check_window`)."""
        self.translator.check_window(text)

    def _stream(self, text, stop=None):
        """The pieces of `text`'s translation, until `stop` (a
        `threading.Event`) is set: the sentence then leaves the loop at
        its next step."""
        return self.translator.stream(text, stop=stop)

    def run(self, signature, inputs):
        """`translation` of each text: the file's one answer
        (`LiteRTTranslator.answer`: its streams, joined, where it
        streams, so that a streamed answer and a whole one agree)."""
        texts = _texts(inputs)
        for text in texts:
            self.check_prompt(text)
        out = [self.translator.answer(t) for t in texts]
        return {"translation": np.array(out, dtype=object)}


def open_litert(path, accelerator="cpu", vocabulary_path=None):
    """A `.tflite` classifier or translator (one-call, streaming, or
    both) written by keras_attn."""
    from keras_attn_runtime.classifier import LiteRTClassifier
    from keras_attn_runtime.translator import LiteRTTranslator

    _, model = load_verified(path)
    config = config_object(metadata(model).get(METADATA_CONFIG), path)
    if format_of(config) in (TRANSLATOR, STREAMING_DECODER):
        return TranslatorArtifact(
            path, LiteRTTranslator(path, accelerator=accelerator)
        )
    classifier = LiteRTClassifier(
        path, vocabulary_path, accelerator=accelerator
    )
    return TextClassifierArtifact(path, "litert", classifier)


def open_bundle(path, accelerator="cpu"):
    """A decoder-only folder's `.litertlm` bundle, run from its folder
    (`keras_attn_runtime.generator.BundleGenerator`)."""
    folder = os.path.dirname(path) or "."
    if accelerator != "cpu":
        raise ValueError(
            "A .litertlm bundle runs on the CPU here. Received: "
            f"accelerator={accelerator!r}"
        )
    if not generator.is_bundle_generator(folder):
        raise ValueError(
            "Expected a .litertlm bundle in a decoder-only folder (with "
            f"{generator.SETTINGS} and {generator.TOKENIZER}). Received: "
            f"{path!r}"
        )
    return generator.BundleGenerator(folder)


def open_onnx(path):
    """A `.onnx` classifier written by keras_attn."""
    from keras_attn_runtime.classifier import OnnxClassifier

    return TextClassifierArtifact(path, "onnx", OnnxClassifier(path))


def open(  # noqa: A001
    path,
    accelerator="cpu",
    vocabulary_path=None,
    allow_unsafe=False,
    flag="path",
    verify=None,
    prefer=None,
):
    """The artifact at `path` (a file, or a folder read in the order
    above): a LiteRT file run on `accelerator` (`vocabulary_path` for one
    without its vocabulary), an ONNX file, or, through the loader
    registered for it (`register`), a SavedModel (its ops checked unless
    `allow_unsafe`) or a `.keras` file. A `ValueError` naming `flag` when
    there is none, or no loader for its kind. `verify`: a
    `keras_attn_runtime.signing.Verifier` the model must pass before
    anything of it is read (a `SignatureRefused` otherwise). `prefer`:
    the kind a folder holding several is opened from (`find`)."""
    if verify is not None:
        verify(path)
    kind, file = found(path, flag, prefer)
    if kind == "litert":
        return open_litert(file, accelerator, vocabulary_path)
    if kind == "onnx":
        return open_onnx(file)
    if kind == "litertlm":
        return open_bundle(file, accelerator)
    load = _LOADERS.get(kind)
    if load is None:
        raise ValueError(
            f"A {kind} artifact needs keras_attn with TensorFlow and Keras "
            "(from keras_attn's source: pip install '.[cpu]', then `import "
            "keras_attn.loading.opener`); this runtime opens .tflite and .onnx "
            f"files. Received: {flag}={path!r}"
        )
    return load(file, allow_unsafe)

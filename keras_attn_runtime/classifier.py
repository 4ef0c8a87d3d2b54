"""Text classifiers exported by `keras_attn.export`, run with LiteRT or
onnxruntime and NumPy: no Keras, no TensorFlow."""

import os
import threading

import numpy as np

from keras_attn_runtime.artifact import (
    METADATA_CONFIG,
    METADATA_VOCABULARY,
    TEXT_CLASSIFIER,
    check_external_data,
    check_format,
    config_object,
    length_axes,
    load_verified,
    metadata,
    metadata_length,
)
from keras_attn_runtime.engine import LiteRTModel
from keras_attn_runtime.text import (
    Tokenizer,
    as_texts,
    check_vocabulary,
    parse_vocabulary,
    read_vocabulary,
)


class OnnxClassifier:
    """A text classifier written by `export.export_text_model(onnx=...)`,
    run with `onnxruntime` and this module's tokenizer (no TensorFlow).

    The vocabulary and the length come from the file's `metadata_props`.

    Args:
        model_path: the `.onnx` file.
    """

    def __init__(self, model_path):
        try:
            import onnx
            import onnxruntime
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                f"An ONNX model needs the module {err.name!r}: pip install "
                "'keras-attn-runtime[onnx]' (or the onnx and onnxruntime "
                f"packages). Received: model_path={model_path!r}",
                name=err.name,
            ) from None
        if not os.path.isfile(model_path):
            raise ValueError(
                f"No such ONNX model. Received: model_path={model_path!r}"
            )
        try:
            proto = onnx.load(model_path, load_external_data=False)
        except Exception as err:  # onnx raises DecodeError and others
            raise ValueError(
                f"Not a valid ONNX model: {model_path!r} ({err})"
            ) from None
        meta = {p.key: p.value for p in proto.metadata_props}
        if METADATA_VOCABULARY not in meta:
            raise ValueError(
                "Expected an ONNX classifier exported by keras_attn (with "
                f"its vocabulary in metadata_props). Received: {model_path!r}"
            )
        vocabulary = check_vocabulary(
            meta[METADATA_VOCABULARY].split("\n"), model_path
        )
        config = config_object(meta.get(METADATA_CONFIG), model_path)
        check_format(config, TEXT_CLASSIFIER, model_path)
        check_external_data(proto, model_path)
        length = metadata_length(
            config.get("max_length"), "max_length", model_path
        )
        self.tokenizer = Tokenizer(vocabulary, length)
        self.session = onnxruntime.InferenceSession(model_path)
        first = self.session.get_inputs()[0]
        self.input = first.name
        self.dtype = "int64" if first.type == "tensor(int64)" else "int32"
        self.outputs = [o.name for o in self.session.get_outputs()]

    def predict_ids(self, ids):
        ids = np.asarray(ids, self.dtype)
        values = self.session.run(None, {self.input: ids})
        return dict(zip(self.outputs, values, strict=True))

    def predict(self, texts):
        return self.predict_ids(self.tokenizer(texts))


class LiteRTClassifier:
    """A `.tflite` text classifier with the vocabulary bound to it.

    Models written by `keras_attn.export.export_text_tflite` carry their
    vocabulary inside the flatbuffer (metadata `keras_attn.vocabulary`);
    a `.tflite` without one needs `vocabulary_path`. Safe to share between
    threads: calls into LiteRT are serialized by a lock.

    The file runs under LiteRT's `CompiledModel` (see
    `keras_attn_runtime.engine`; `self.litert.engine` says which engine
    runs it).

    Args:
        model_path: the `.tflite` file.
        vocabulary_path: one token per line, for models without an
            embedded vocabulary. Defaults to `None`.
        num_threads: CPU threads (`None`: LiteRT's choice). Defaults to
            `1`.
        accelerator: `"cpu"` (the default), `"gpu"` or `"npu"`, with the
            CPU running what the accelerator cannot
            (`self.litert.fully_accelerated`).
        cpu_kernels: `"auto"` (the default: for the file's kind, the
            fastest settings that give the same numbers for the same
            input, whatever the process, threads, load or callers),
            `"builtin"` or `"xnnpack"` (see `keras_attn_runtime.engine.
            LiteRTModel`).
    """

    def __init__(
        self,
        model_path,
        vocabulary_path=None,
        num_threads=1,
        accelerator="cpu",
        cpu_kernels="auto",
    ):
        # What pickling carries (`__reduce__`): the file is opened again.
        self._arguments = (
            model_path,
            vocabulary_path,
            num_threads,
            accelerator,
            cpu_kernels,
        )
        data, model = load_verified(model_path)
        meta = metadata(model)
        config = config_object(meta.get(METADATA_CONFIG), model_path)
        check_format(config, TEXT_CLASSIFIER, model_path)
        if vocabulary_path is not None:
            vocabulary = read_vocabulary(vocabulary_path)
        elif METADATA_VOCABULARY in meta:
            vocabulary = parse_vocabulary(
                meta[METADATA_VOCABULARY],
                f"the vocabulary embedded in {model_path!r}",
            )
        else:
            raise ValueError(
                "This LiteRT model carries no vocabulary; pass the one it "
                "was exported with. Received: vocabulary_path=None for "
                f"model_path={model_path!r}"
            )
        self.config = config
        self.litert = LiteRTModel(
            data, model, model_path, num_threads, accelerator, cpu_kernels
        )
        self._lock = threading.Lock()
        keys = sorted(self.litert.signatures)
        inputs = self.litert.signatures[keys[0]]["inputs"] if keys else {}
        if len(keys) != 1 or len(inputs) != 1:
            raise ValueError(
                "Expected a LiteRT text model with one signature and one "
                f"token input. Received: {model_path!r} with signatures "
                f"{keys}" + (f" and inputs {sorted(inputs)}" if keys else "")
            )
        self.runner = self.litert.runner(keys[0])
        ((self.input_name, spec),) = inputs.items()
        self.length_axes = length_axes(config, model_path)
        self.batch_size, length = (int(d) for d in spec["shape"])
        # A model exported with `dynamic_length=True` has a -1 time axis: it
        # takes each review's own tokens (and cuts them at its length).
        self.dynamic = int(spec["shape_signature"][1]) == -1
        max_tokens = config.get("max_length")
        if max_tokens is not None:
            max_tokens = metadata_length(
                max_tokens,
                "max_length",
                model_path,
                None if self.dynamic else length,
            )
        metadata_length(length, "its input length", model_path)
        self.max_length = max_tokens
        self.tokenizer = Tokenizer(
            vocabulary,
            None if self.dynamic else length,
            max_tokens=max_tokens,
        )

    def __reduce__(self):
        """Pickled as its arguments, opened again when unpickled (a
        LiteRT interpreter cannot be pickled): a `beam.Map` or a
        multiprocessing pool can carry the reader."""
        return type(self), self._arguments

    def _run(self, **inputs):
        with self._lock:
            try:
                out = self.runner(**inputs)
            except (ValueError, RuntimeError) as err:
                raise ValueError(
                    f"The LiteRT model failed to run: {err}"
                ) from None
            return {k: np.array(v) for k, v in out.items()}

    def _run_row(self, row):
        """One variable-length row; outputs whose time axis the file pads
        to its length (`length_axes`) cut back to the row's own."""
        out = self._run(**{self.input_name: row[None]})
        width = min(len(row), self.max_length or len(row))
        for name, axes in self.length_axes.items():
            if name in out:
                index = [slice(None)] * out[name].ndim
                for axis in axes:
                    index[axis] = slice(0, width)
                out[name] = out[name][tuple(index)]
        return out

    def _predict_each(self, rows):
        """Variable-length rows one at a time; outputs padded with zeros
        on their last axis to the widest (the attention's time axis)."""
        outs = [self._run_row(row) for row in rows]
        if not outs:  # no texts: no outputs, as the fixed-length path
            return {}
        stacked = {}
        for name in outs[0]:
            width = max(o[name].shape[-1] for o in outs)
            stacked[name] = np.concatenate(
                [
                    np.pad(
                        o[name],
                        [(0, 0)] * (o[name].ndim - 1)
                        + [(0, width - o[name].shape[-1])],
                    )
                    for o in outs
                ]
            )
        return stacked

    def predict_ids(self, ids):
        """Run batches of token ids; returns a dict of stacked outputs."""
        if self.dynamic:
            return self._predict_each(ids)
        outputs = {}
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start : start + self.batch_size]
            pad = self.batch_size - len(chunk)
            if pad:
                chunk = np.concatenate(
                    [chunk, np.zeros((pad, chunk.shape[1]), "int32")]
                )
            out = self._run(**{self.input_name: chunk})
            for name, value in out.items():
                outputs.setdefault(name, []).append(
                    value[: self.batch_size - pad]
                )
        return {k: np.concatenate(v) for k, v in outputs.items()}

    def predict(self, texts):
        """Outputs for `texts` (a list of strings, or one string)."""
        return self.predict_ids(self.tokenizer(as_texts(texts)))

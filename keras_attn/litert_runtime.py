"""Run an exported text model with LiteRT only: no TensorFlow, no Keras.

This is the phone-like path: `ai_edge_litert` and NumPy. Tokenization
mirrors `keras_attn.text.standardize_review` followed by the
`TextVectorization` whitespace split and vocabulary lookup (index 0 is
padding, 1 is out-of-vocabulary); a test checks both give the same ids.
"""

import os
import re

import numpy as np

_TAGS = re.compile(r"<[^>]*>")
_MARKS = re.compile(r"([!?])")
_OTHER = re.compile(r"[^a-z0-9!?' ]")
_QUOTES = re.compile(r"(^|\s)'+|'+(\s|$)")


def standardize(text):
    """The same steps as `keras_attn.text.standardize_review`."""
    text = "".join(c.lower() if c < "\x80" else c for c in text)
    text = _TAGS.sub(" ", text)
    text = _MARKS.sub(r" \1 ", text)
    text = _OTHER.sub(" ", text)
    return _QUOTES.sub(" ", text)


def read_vocabulary(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


class Tokenizer:
    """Text → token ids, as the exported model expects: fixed-length rows,
    or (`length=None`) one array per text of its own length."""

    def __init__(self, vocabulary, length):
        self.index = {tok: i for i, tok in enumerate(vocabulary) if i > 1}
        self.length = length

    def __call__(self, texts):
        if self.length is None:  # each review's own tokens (at least one)
            return [
                np.array(
                    [self.index.get(t, 1) for t in standardize(text).split()]
                    or [0],
                    "int32",
                )
                for text in texts
            ]
        ids = np.zeros((len(texts), self.length), "int32")
        for row, text in enumerate(texts):
            tokens = standardize(text).split()[: self.length]
            ids[row, : len(tokens)] = [self.index.get(t, 1) for t in tokens]
        return ids


class LiteRTClassifier:
    """A `.tflite` text classifier and its vocabulary.

    Args:
        model_path: the `.tflite` file.
        vocabulary_path: one token per line; defaults to `vocabulary.txt`
            beside the model.
        num_threads: interpreter threads. Defaults to `None` (LiteRT's).
    """

    def __init__(self, model_path, vocabulary_path=None, num_threads=None):
        from ai_edge_litert.interpreter import Interpreter

        if not os.path.isfile(model_path):
            raise ValueError(
                f"No such LiteRT model. Received: model_path={model_path!r}"
            )
        vocabulary_path = vocabulary_path or os.path.join(
            os.path.dirname(model_path), "vocabulary.txt"
        )
        if not os.path.isfile(vocabulary_path):
            raise ValueError(
                "No vocabulary beside the LiteRT model. Received: "
                f"vocabulary_path={vocabulary_path!r}"
            )
        try:
            self.interpreter = Interpreter(
                model_path=model_path, num_threads=num_threads
            )
            self.runner = self.interpreter.get_signature_runner()
        except (ValueError, RuntimeError) as err:
            raise ValueError(
                f"Not a valid LiteRT model: {model_path!r} ({err})"
            ) from err
        (spec,) = self.runner.get_input_details().values()
        self.batch_size, length = spec["shape"]
        # A model exported with `dynamic_length=True` has a -1 time axis: it
        # takes each review's own tokens (and cuts them at its length).
        self.dynamic = int(spec["shape_signature"][1]) == -1
        self.tokenizer = Tokenizer(
            read_vocabulary(vocabulary_path), None if self.dynamic else length
        )

    def _predict_each(self, rows):
        """Variable-length rows one at a time; outputs padded with zeros
        on their last axis to the widest (the attention's time axis)."""
        outs = [self.runner(tokens=row[None]) for row in rows]
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
            out = self.runner(tokens=chunk)
            for name, value in out.items():
                outputs.setdefault(name, []).append(
                    value[: self.batch_size - pad]
                )
        return {k: np.concatenate(v) for k, v in outputs.items()}

    def predict(self, texts):
        return self.predict_ids(self.tokenizer(list(texts)))


_SENT_SPACES = re.compile("[\u202f\u00a0\u2009]")
_SENT_PUNCT = re.compile(r"([.,!?;:\"«»()])")
_SENT_WS = re.compile(r"[\t\n\f\r ]+")


def standardize_sentence(text):
    """The same steps as `keras_attn.text.standardize_sentence`."""
    text = "".join(c.lower() if c < "\x80" else c for c in text)
    text = _SENT_SPACES.sub(" ", text)
    text = _SENT_PUNCT.sub(r" \1 ", text)
    text = text.replace("'", "' ")
    return _SENT_WS.sub(" ", text).strip("\t\n\f\r ")


class LiteRTTranslator:
    """Greedy translation with the `encode`/`step` LiteRT signatures.

    Args:
        model_path: the `.tflite` file from `export_seq2seq_tflite`.
        folder: where `source_vocabulary.txt` and `target_vocabulary.txt`
            are. Defaults to the model's folder.
        max_length: the most output tokens. Defaults to `20`.
    """

    def __init__(self, model_path, folder=None, max_length=20):
        from ai_edge_litert.interpreter import Interpreter

        folder = folder or os.path.dirname(os.path.abspath(model_path))
        self.source_vocab = read_vocabulary(
            os.path.join(folder, "source_vocabulary.txt")
        )
        self.target_vocab = read_vocabulary(
            os.path.join(folder, "target_vocabulary.txt")
        )
        self.index = {t: i for i, t in enumerate(self.source_vocab) if i > 1}
        self.interpreter = Interpreter(model_path=model_path)
        self.encode = self.interpreter.get_signature_runner("encode")
        self.step = self.interpreter.get_signature_runner("step")
        self.length = self.encode.get_input_details()["source"]["shape"][1]
        self.start = self.target_vocab.index("[start]")
        self.end = self.target_vocab.index("[end]")
        self.max_length = max_length
        # Never emit the unknown-word token (as the SavedModel does).
        self.banned = [
            i for i, t in enumerate(self.target_vocab) if t == "[UNK]"
        ]

    def source_ids(self, text):
        ids = np.zeros((1, self.length), "int32")
        tokens = standardize_sentence(text).split(" ")[: self.length]
        tokens = [t for t in tokens if t]
        ids[0, : len(tokens)] = [self.index.get(t, 1) for t in tokens]
        return ids

    def translate_ids(self, text):
        source = self.source_ids(text)
        enc = self.encode(source=source)
        memory, state = enc["memory"], enc["state"]
        mask = source != 0
        prev, out = self.start, []
        for _ in range(self.max_length):
            res = self.step(
                prev=np.array([[prev]], "int32"),
                state=state,
                memory=memory,
                memory_mask=mask,
            )
            logits = np.array(res["logits"][0], "float32")
            logits[self.banned] = -np.inf
            prev = int(np.argmax(logits))
            state = res["state"]
            if prev == self.end:
                break
            out.append(prev)
        return out

    def translate(self, text):
        words = [
            self.target_vocab[i] for i in self.translate_ids(text) if i > 0
        ]
        joined = " ".join(words).replace("' ", "'")
        return re.sub(r" ([.,])", r"\1", joined).strip()

"""`keras-attn classify`, `predict` and `demo`: texts scored by a text
classifier (a `.keras`, SavedModel, `.tflite` or `.onnx` file), and the
generated-task demo."""

import itertools
import os

import numpy as np

from keras_attn_cli.commands.translating import (
    SAMPLE_SENTENCES,
    print_translations,
)
from keras_attn_cli.finding import (
    GET_MODELS,
    find_shipped_model,
    find_translator,
    resolve_model,
)
from keras_attn_cli.inputs import (
    CHUNK,
    iter_texts,
    read_texts,
    snippet,
)
from keras_attn_cli.loading import (
    known_words,
    load_classifier,
    open_model,
    run_model,
)
from keras_attn_runtime.signature import DEFAULT_SIGNATURE

SAMPLE_REVIEWS = [
    "One of the best films I have seen in years. The acting is superb and "
    "the story kept me on the edge of my seat. Highly recommended!",
    "A complete waste of time. The plot made no sense, the dialogue was "
    "awful and I nearly walked out. Avoid this boring mess.",
    "I expected little, but the cast is wonderful and the ending moved me "
    "to tears. A beautiful, funny and touching movie.",
    "Terrible acting, cheap effects and a script so bad it hurts. Easily "
    "the worst movie of the year.",
]


NO_WORD = "no known word"


def _verdict(p, known):
    if known == 0:
        return f"-\t{NO_WORD}"
    label = "positive" if p > 0.5 else "negative"
    return f"{p:.4f}\t{label}"


# ---------------------------------------------------------------- models


def classify(args):
    path = args.model and resolve_model(args.model, "--model", "keras", args)
    path = path or find_shipped_model(args)
    if path is None:
        raise ValueError(GET_MODELS)
    from keras_attn import explain

    texts = read_texts(args, default=SAMPLE_REVIEWS)
    model = load_classifier(path)
    known = known_words(model, texts)
    print(f"Model: {path}\n")
    results = run_model(explain.attend, model, texts)
    mattered = run_model(explain.attribute, model, texts)
    for result, why, n in zip(results, mattered, known, strict=True):
        print(
            f"[{_verdict(result['probability'], n)}] "
            f"{snippet(result['text'], 90)}"
        )
        if n:
            print(f"    mattered most ({why['method']}): {_top(why, 6)}")
            words = ", ".join(w for w, _ in explain.top_tokens(result, 6))
            print(f"    attention picked: {words}")
        print()
    translator = find_translator(args)
    if translator and not (args.text or args.file):
        print_translations(translator, SAMPLE_SENTENCES, alignment=True)
    return 0


def _top(result, k):
    """The `k` distinct words an attribution scores highest."""
    picked = []
    for j in np.argsort(-result["scores"], kind="stable"):
        if result["words"][j] not in picked:
            picked.append(result["words"][j])
        if len(picked) == k:
            break
    return ", ".join(picked)


def demo(args):
    from keras_attn import demo

    if args.epochs <= 0:
        raise ValueError(
            f"Expected a positive number. Received: --epochs={args.epochs}"
        )
    demo.run(epochs=args.epochs)
    return 0


def predict(args):
    for i, text in enumerate(args.text or ()):
        if not text.strip():  # a blank line of a --file is scored
            where = "text" if len(args.text) == 1 else f"text {i + 1}"
            raise ValueError(
                f"Expected a non-empty text. Received: {where}={text!r}"
            )
    path = resolve_model(args.artifact, "artifact", "any", args)
    if args.require_signature is not None:
        from keras_attn_runtime.signing import Verifier

        Verifier(args.require_signature, "--require-signature")(path)
    score = scorer(path, args)
    texts = iter_texts(args)
    while True:
        chunk = list(itertools.islice(texts, CHUNK))
        if not chunk:
            return 0
        probs, known = score(chunk)
        if probs.shape[0] != len(chunk):
            raise ValueError(
                "Expected one probability per text. Received: "
                f"{probs.shape[0]} for {len(chunk)} texts"
            )
        for text, p, n in zip(chunk, probs, known, strict=True):
            print(f"{_verdict(float(p), n)}\t{snippet(text)}", flush=True)


def scorer(path, args):
    """`score(texts) -> (probabilities, known-word counts)` for the
    artifact at `path` (`open_model`), loaded once."""
    if path.endswith(".litertlm"):
        raise ValueError(
            "Expected a classifier (`keras-attn predict` scores texts). "
            f"Received: artifact={path!r}, a decoder-only model's bundle: "
            "translate with it (`keras-attn translate --model FOLDER`) or "
            "serve it (`keras-attn serve FOLDER`)"
        )
    if path.endswith((".tflite", ".onnx")):
        artifact = open_model(
            path,
            accelerator=args.accelerator,
            vocabulary_path=args.vocabulary,
            flag="artifact",
        )
        return _runtime_scorer(artifact)
    if os.path.isdir(path):
        artifact = open_model(
            path, allow_unsafe=args.allow_unsafe_ops, flag="artifact"
        )
        return _saved_model_scorer(artifact)
    model = load_classifier(path)

    def score(texts):
        out = run_model(model.predict, np.array(texts, dtype=object), 256, 0)
        return _probabilities(out), known_words(model, texts)

    return score


def _runtime_scorer(artifact):
    """`scorer` for a LiteRT or ONNX classifier: known words are the
    ids past padding and the unknown token."""
    kind = {"litert": "LiteRT", "onnx": "ONNX"}[artifact.kind]
    clf = getattr(artifact, "classifier", None)
    default = artifact.signatures.get(DEFAULT_SIGNATURE)
    outputs = [] if clf is None or default is None else sorted(default.outputs)
    if "probability" not in outputs:
        what = "a translator" if clf is None else f"outputs {outputs}"
        raise ValueError(
            f"Expected a {kind} classifier with a 'probability' output. "
            f"Received: {artifact.path!r} with {what}"
        )

    def score(texts):
        ids = clf.tokenizer(texts)
        known = [int((np.asarray(row) > 1).sum()) for row in ids]
        return _probabilities(clf.predict_ids(ids)), known

    return score


def _saved_model_scorer(artifact):
    """`scorer` for a text-classifier SavedModel (`serving_default`)."""
    import tensorflow as tf

    from keras_attn import export
    from keras_attn.legacy import saved_models as legacy_saved_models
    from keras_attn.loading.opener import saved_classifier

    fn = saved_classifier(artifact.loaded, artifact.path)

    def score(texts):
        result = run_model(fn, tf.constant(texts))
        out = {k: v.numpy() for k, v in result.items()}
        if export.KNOWN_WORDS in out:  # written by keras_attn >= 0.3
            known = [int(n) for n in out[export.KNOWN_WORDS]]
        else:
            known = legacy_saved_models.known_words(out, len(texts))
        return _probabilities(out), known

    return score


def _probabilities(out):
    return np.ravel(np.asarray(out["probability"], "float32"))

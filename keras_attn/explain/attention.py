"""A text classifier's attention, read back per text (`attend`)."""

import numpy as np


def find_vectorizer(model):
    """The model's one `TextVectorization` layer (at any depth)."""
    import keras

    found = [
        layer
        for layer in walk(model)
        if isinstance(layer, keras.layers.TextVectorization)
    ]
    if len(found) != 1:
        raise ValueError(
            "Expected a model with one TextVectorization layer. Received: "
            f"model={model.name!r} with {len(found)}"
        )
    return found[0]


def walk(model):
    """Every layer of `model`, nested models' layers included."""
    for layer in getattr(model, "layers", []):
        yield layer
        yield from walk(layer)


def attend(model, texts):
    """Probabilities and, per text, its tokens and attention.

    Each result holds `text`, `probability`, `tokens` (as the model's
    vocabulary names them: `[UNK]` for an unknown word), `words` (the
    text's own token strings, or `None` where the model's standardization
    is not the reviews' one), `known` (per token, whether the vocabulary
    holds it) and `attention` `(hops, n_tokens)`.

    `model`: a raw-text Keras model, or a classifier of the edge runtime
    (`keras_attn_runtime.LiteRTClassifier`, a `.tflite` file: its
    attention output, int8 in a full-integer file, dequantized)."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if hasattr(model, "predict_ids"):
        return _attend_runtime(model, texts)
    out = model.predict(np.array(texts, dtype=object), verbose=0)
    if not isinstance(out, dict) or "attention" not in out:
        raise ValueError(
            "Expected a model whose outputs include 'attention'. Received "
            f"outputs: {sorted(out) if isinstance(out, dict) else type(out)}"
        )
    vectorizer = find_vectorizer(model)
    vocab = vectorizer.get_vocabulary()
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.asarray(vectorizer(np.array(texts, dtype=object)))
    results = []
    for i in range(len(texts)):
        n = int(np.count_nonzero(ids[i]))
        words = own_words(texts[i], n, index, ids[i][:n])
        results.append(
            {
                "text": texts[i],
                "probability": float(np.ravel(out["probability"][i])[0]),
                "tokens": [vocab[t] for t in ids[i][:n]],
                "words": words,
                "known": np.asarray(ids[i][:n]) > 1,
                "attention": np.asarray(out["attention"][i])[:, :n],
            }
        )
    return results


def own_words(text, n, index, ids):
    """The text's first `n` tokens as the reviews' standardization cuts
    them, if they are what the model read (same ids), else `None`."""
    from keras_attn_runtime.text import tokens

    words = list(tokens(text, n))
    if [index.get(w, 1) for w in words] != [int(t) for t in ids]:
        return None
    return words


def _attend_runtime(classifier, texts):
    from keras_attn_runtime.attribution import ClassifierReader

    out = classifier.predict(texts)
    if "attention" not in out:
        raise ValueError(
            "Expected a model whose outputs include 'attention'. Received "
            f"outputs: {sorted(out)}"
        )
    results = []
    for i, item in enumerate(ClassifierReader(classifier).read(texts)):
        results.append(
            {
                "text": item.text,
                "probability": float(np.ravel(out["probability"][i])[0]),
                "tokens": [
                    w if k else "[UNK]"
                    for w, k in zip(item.words, item.known, strict=True)
                ],
                "words": item.words,
                "known": item.known,
                "attention": np.asarray(out["attention"][i])[
                    :, : len(item.ids)
                ],
            }
        )
    return results


def top_tokens(result, k=8):
    """The `k` tokens with the most attention summed over hops."""
    total = result["attention"].sum(0)
    order = np.argsort(-total)
    seen, picked = set(), []
    for j in order:
        if result["tokens"][j] not in seen:
            seen.add(result["tokens"][j])
            picked.append((result["tokens"][j], float(total[j])))
        if len(picked) == k:
            break
    return picked

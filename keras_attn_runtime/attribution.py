"""Which words a text classifier used: attributions, and the erasure test
that says how far to trust them.

An attribution gives each token a model read one score, higher meaning
more support for the class the model predicted. A method is judged the
way ERASER does it (DeYoung et al. 2020, arXiv:1911.03429): erase the top
`k` % of tokens and see the predicted class's probability drop
(comprehensiveness, higher is more faithful), or keep only them and see
it drop (sufficiency, lower is more faithful), averaged over
`k` ∈ `FRACTIONS` (AOPC). Erasing a token removes it from the sequence:
the tokens after it move up, as if it had never been written.

This module needs NumPy only. It runs every method that needs no
gradients on any *reader*: an object that turns texts into `Item`s and
token rows into probabilities (`ClassifierReader` adapts the runtime's
LiteRT and ONNX classifiers; `keras_attn.explain` adds Keras models and
SavedModels, with gradients). A reader has:

- `read(texts)`: one `Item` per text;
- `probability(rows)`: `P(positive)` `(N,)` for rows of token ids
  (each its own length; the reader pads them);
- `attention(rows)`: the model's attention `(N, hops, T)`, or the
  attribute is `None` when the model has none;
- optionally `value_norms(item)` (`‖h_t‖` of the vectors the attention
  averages, for `"norm"`) and `embedding_gradients(item, scales)` (for
  the gradient methods).
"""

import dataclasses
import time

import numpy as np

from keras_attn_runtime.text import tokens

FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)


@dataclasses.dataclass
class Item:
    """One text as a model reads it: `ids` `(n,)` the tokens it read (no
    padding), `words` their strings (the text's own, or the vocabulary's
    names where the standardization is not the runtime's), `known` per
    token whether the vocabulary holds it."""

    text: str
    ids: np.ndarray
    words: list
    known: np.ndarray


def predicted(probability):
    """The predicted class's probability for `P(positive)` values."""
    p = np.asarray(probability, "float64")
    return np.where(p >= 0.5, p, 1.0 - p)


def class_probability(reader, rows, positive):
    """`P(class)` of each row, the class being positive where `positive`."""
    p = np.asarray(reader.probability(rows), "float64")
    return np.where(positive, p, 1.0 - p)


def erase(ids, drop):
    """`ids` without the positions in `drop` (order kept)."""
    keep = np.ones(len(ids), bool)
    keep[np.asarray(list(drop), int)] = False
    return ids[keep]


def top_positions(scores, fraction):
    """The `max(1, round(fraction · n))` positions with the highest
    scores (ties: the earlier position first)."""
    scores = np.asarray(scores, "float64")
    count = max(1, int(round(fraction * len(scores))))
    return np.argsort(-scores, kind="stable")[:count]


# The methods. Each takes the reader, the item, `base` (the predicted
# class's probability for the whole text), `positive` (the predicted
# class), a NumPy `Generator` and the options, and returns `(n,)` scores.


def _attention(reader, item, base, positive, rng, options):
    maps = _hops(reader, item)
    return maps.sum(0)


def _hops(reader, item):
    if getattr(reader, "attention", None) is None:
        raise ValueError(
            "Expected a model with an 'attention' output for "
            "method='attention'. Received: a model without one"
        )
    (a,) = reader.attention([item.ids])
    return np.asarray(a, "float64")[:, : len(item.ids)]  # (hops, n)


def _norm(reader, item, base, positive, rng, options):
    """Kobayashi et al. 2020 (arXiv:2004.10102): a token's share of a hop
    is `‖a_ht · h_t‖`, the size of what it adds to the hop's output."""
    if not hasattr(reader, "value_norms"):
        raise ValueError(
            "method='norm' needs the vectors the attention averages, which "
            "only a Keras model holding a StructuredSelfAttention layer "
            f"gives. Received: {type(reader).__name__}"
        )
    attention, norms = reader.value_norms(item)
    return (np.asarray(attention, "float64") * norms[None]).sum(0)


def _occlusion(reader, item, base, positive, rng, options):
    """Leave one out: the drop when the token alone is erased."""
    n = len(item.ids)
    rows = [erase(item.ids, [t]) for t in range(n)]
    return base - class_probability(reader, rows, positive)


def _shapley(reader, item, base, positive, rng, options):
    """Shapley values of the tokens, estimated by permutation sampling
    (Castro et al. 2009; Štrumbelj & Kononenko 2010): along a random
    order, each token's score is the probability it adds when it joins
    the tokens before it, averaged over `samples` orders (drawn in
    antithetic pairs: an order and its reverse). Erasing a token is the
    value function's absence. Costs `samples · (n + 1)` rows."""
    samples = int(options.get("samples", 8))
    if samples < 1:
        raise ValueError(
            f"Expected samples to be a positive integer. Received: "
            f"samples={samples}"
        )
    n = len(item.ids)
    orders = []
    while len(orders) < samples:
        order = rng.permutation(n)
        orders += [order, order[::-1]]
    orders = orders[:samples]
    rows, starts = [], []
    for order in orders:
        present = np.zeros(n, bool)
        starts.append(len(rows))
        rows.append(item.ids[present])
        for t in order:
            present[t] = True
            rows.append(item.ids[present])
    value = class_probability(reader, rows, positive)
    scores = np.zeros(n)
    for order, start in zip(orders, starts, strict=True):
        scores[order] += np.diff(value[start : start + n + 1])
    return scores / len(orders)


def _greedy(reader, item, base, positive, rng, options):
    """Greedy erasure in rounds (after Feng et al. 2018's input
    reduction, turned round): leave one out among the tokens still there,
    erase the best ones, and again, each round erasing as many as all the
    rounds before it (1, 1, 2, 4, ... % of the text), until half is
    erased. A token erased in round `r` of `R` scores `2 (R - r)` plus
    its drop then (earlier rounds rank higher); the rest keep their
    drops in the last round. Seven rounds for a text of 100 tokens or
    more, each over the tokens left: about `6.4 n` rows."""
    n = len(item.ids)
    present = np.ones(n, bool)
    scores = np.zeros(n)
    rounds = []  # per round: the tokens erased and their drops then
    erased, target = 0, max(1, int(round(0.01 * n)))
    while present.sum() > 1 and erased < n // 2:
        left = np.flatnonzero(present)
        rows = [item.ids[present & (np.arange(n) != t)] for t in left]
        drops = base - class_probability(reader, rows, positive)
        scores[left] = drops
        take = min(target, n // 2, len(left) - 1 + erased) - erased
        order = np.argsort(-drops, kind="stable")[:take]
        rounds.append((left[order], drops[order]))
        present[left[order]] = False
        erased += take
        target = 2 * erased
    for r, (tokens_, drops) in enumerate(rounds):  # earlier rounds first
        scores[tokens_] = 2.0 * (len(rounds) - r) + drops
    return scores


def _gradient_x_input(reader, item, base, positive, rng, options):
    """Gradient × input (Shrikumar et al. 2016; Denil et al. 2014): the
    predicted class's probability's gradient with respect to each token's
    embedding, dotted with the embedding."""
    embeddings, gradients = _gradients(reader, item, np.ones(1), positive)
    return (embeddings * gradients[0]).sum(-1)


def _integrated_gradients(reader, item, base, positive, rng, options):
    """Integrated gradients (Sundararajan et al. 2017, arXiv:1703.01365)
    from the all-zero embeddings: `e · mean_k ∇F((k - ½)/m · e)`, the
    midpoint rule on `steps` (`m`) points. The scores add up to
    `F(e) - F(0)` as `m` grows (completeness)."""
    steps = int(options.get("steps", 32))
    if steps < 1:
        raise ValueError(
            f"Expected steps to be a positive integer. Received: steps={steps}"
        )
    scales = (np.arange(steps) + 0.5) / steps
    embeddings, gradients = _gradients(reader, item, scales, positive)
    return (embeddings * gradients.mean(0)).sum(-1)


def _gradients(reader, item, scales, positive):
    if not hasattr(reader, "embedding_gradients"):
        raise ValueError(
            "The gradient methods need a Keras model (they differentiate "
            "through its Embedding layer). Received: "
            f"{type(reader).__name__}; use method='occlusion' or "
            "'shapley' on this file"
        )
    embeddings, gradients = reader.embedding_gradients(item, scales, positive)
    return np.asarray(embeddings, "float64"), np.asarray(gradients, "float64")


def _random(reader, item, base, positive, rng, options):
    """Random ranks: the floor any explanation must beat."""
    return rng.random(len(item.ids))


@dataclasses.dataclass(frozen=True)
class Method:
    """A named method: `function`, what it `needs` from the reader and
    its cost in forward passes for a text of `n` tokens."""

    name: str
    function: object
    needs: str
    cost: str


METHODS = {
    m.name: m
    for m in (
        Method("attention", _attention, "attention", "1 pass"),
        Method("norm", _norm, "value_norms", "1 pass (Keras models)"),
        Method(
            "gradient_x_input",
            _gradient_x_input,
            "embedding_gradients",
            "1 pass and its gradient (Keras models)",
        ),
        Method(
            "integrated_gradients",
            _integrated_gradients,
            "embedding_gradients",
            "steps passes and gradients (Keras models; steps=32)",
        ),
        Method("occlusion", _occlusion, "", "n + 1 passes"),
        Method("shapley", _shapley, "", "samples · (n + 1) passes (8)"),
        Method("greedy", _greedy, "", "about 6.4 n passes (7 rounds)"),
        Method("random", _random, "", "none"),
    )
}

# The default: the method with the highest comprehensiveness on the
# validation reviews (`python -m benchmarks.faithfulness --split
# validation`), on every shipped classifier, among those that every file
# can run (no gradients) within DEFAULT_BUDGET rows for a text of `n`
# tokens; docs/explanations.md gives the figures.
DEFAULT_METHOD = "greedy"
DEFAULT_BUDGET = "8 (n + 1) rows"


def available(reader):
    """The methods `reader` can run, in `METHODS`' order."""
    return [
        name
        for name, m in METHODS.items()
        if not m.needs
        or (
            m.needs == "attention"
            and getattr(reader, "attention", None) is not None
        )
        or (m.needs != "attention" and hasattr(reader, m.needs))
    ]


def check_method(method):
    if method not in METHODS:
        raise ValueError(
            f"Expected method to be one of {sorted(METHODS)}. Received: "
            f"method={method!r}"
        )
    return METHODS[method]


class Counting:
    """A reader that counts the rows it was asked for (the cost)."""

    def __init__(self, reader):
        self.reader = reader
        self.rows = 0

    def __getattr__(self, name):
        value = getattr(self.reader, name)
        if name == "attention" and value is not None:
            return self._counted(value, lambda rows: len(rows))
        if name == "value_norms":
            return self._counted(value, lambda item: 1)
        if name == "embedding_gradients":
            return self._counted(value, lambda item, scales, _: len(scales))
        return value

    def _counted(self, function, rows_of):
        def call(*args):
            self.rows += rows_of(*args)
            return function(*args)

        return call

    def probability(self, rows):
        self.rows += len(rows)
        return self.reader.probability(rows)


def attribute_items(reader, items, method=None, seed=0, **options):
    """Scores of `method` (default `DEFAULT_METHOD`) for `Item`s read by
    `reader`; see `attribute`."""
    method = DEFAULT_METHOD if method is None else method
    spec = check_method(method)
    full = np.asarray(reader.probability([it.ids for it in items]), "float64")
    results = []
    for item, p in zip(items, full, strict=True):
        positive = bool(p >= 0.5)
        counting = Counting(reader)
        rng = np.random.default_rng(seed)
        start = time.perf_counter()
        if len(item.ids):
            scores = spec.function(
                counting, item, float(predicted(p)), positive, rng, options
            )
        else:
            scores = np.zeros(0)
        result = {
            "text": item.text,
            "words": list(item.words),
            "known": item.known,
            "scores": np.asarray(scores, "float64"),
            "probability": float(p),
            "method": method,
            "passes": counting.rows,
            "seconds": time.perf_counter() - start,
        }
        if method == "attention" and len(item.ids):
            result["hops"] = _hops(reader, item)
        results.append(result)
    return results


def attribute(model, texts, method=None, seed=0, **options):
    """Per text: the `words` the model read, one score a word (`scores`,
    higher meaning more support for the predicted class), `probability`
    (`P(positive)`) and `method`, with its cost (`passes`, `seconds`).

    `model`: a runtime classifier (`LiteRTClassifier`, `OnnxClassifier`,
    an artifact of `keras_attn_runtime.open`) or a reader. `method`: one
    of `METHODS` (`None`: `DEFAULT_METHOD`); `"attention"` also gives
    each hop's map as `hops`. Options: `samples` (`"shapley"`, default
    8), `steps` (`"integrated_gradients"`, default 32). `seed` fixes
    `"shapley"` and `"random"`."""
    reader = as_reader(model)
    texts = [texts] if isinstance(texts, str) else list(texts)
    return attribute_items(reader, reader.read(texts), method, seed, **options)


def as_reader(model):
    """`model` as a reader: itself if it is one, else a runtime classifier
    (or an artifact holding one) wrapped in a `ClassifierReader`."""
    if hasattr(model, "read") and hasattr(model, "probability"):
        return model
    classifier = getattr(model, "classifier", model)
    if hasattr(classifier, "predict_ids") and hasattr(classifier, "tokenizer"):
        return ClassifierReader(classifier)
    raise ValueError(
        "Expected a text classifier: a runtime classifier (LiteRT or ONNX, "
        "or an artifact of keras_attn_runtime.open) or a reader; Keras "
        "models and SavedModels go through keras_attn.explain.attribute. "
        f"Received: {type(model).__name__}"
    )


def erasure(reader, item, scores, fractions=FRACTIONS, base=None):
    """ERASER's faithfulness of `scores` for `item`: per fraction, the
    drop in the predicted class's probability when its top tokens are
    erased (`comprehensiveness`) and when only they are kept
    (`sufficiency`), with their means over `fractions` (AOPC) and the
    probabilities after each erasure (`erased`, `kept`: `P(positive)`)."""
    p = base
    if p is None:
        (p,) = reader.probability([item.ids])
    positive = bool(p >= 0.5)
    rows = []
    for fraction in fractions:
        top = top_positions(scores, fraction)
        rows.append(erase(item.ids, top))
        rows.append(item.ids[np.sort(top)])
    after = np.asarray(reader.probability(rows), "float64")
    sign = 1.0 if positive else -1.0
    drops = sign * (float(p) - after)  # the predicted class's drop
    comp, suff = drops[0::2], drops[1::2]
    return {
        "fractions": list(fractions),
        "comprehensiveness": comp,
        "sufficiency": suff,
        "aopc_comprehensiveness": float(comp.mean()),
        "aopc_sufficiency": float(suff.mean()),
        "erased": after[0::2],
        "kept": after[1::2],
    }


class NamedOutputs:
    """A reader of a model with named outputs: a subclass gives `outputs`
    (the names) and `run(rows, name)` (that output for rows of ids);
    `probability` and `attention` are read from them."""

    def probability(self, rows):
        return np.asarray(self.run(rows, "probability")).reshape(len(rows), -1)[
            :, 0
        ]

    @property
    def attention(self):
        if "attention" not in self.outputs:
            return None
        return lambda rows: self.run(rows, "attention")


class ClassifierReader(NamedOutputs):
    """A runtime classifier (`LiteRTClassifier`, `OnnxClassifier`) as a
    reader: the runtime's tokenizer, rows padded with zeros (or each its
    own length, for a file with a free time axis), in chunks of
    `batch_size` rows."""

    def __init__(self, classifier, batch_size=256):
        self.classifier = classifier
        self.batch_size = batch_size
        tokenizer = classifier.tokenizer
        self.limit = tokenizer.length or tokenizer.max_tokens
        self.index = tokenizer.index
        self.dynamic = bool(getattr(classifier, "dynamic", False))
        self._outputs = None

    def read(self, texts):
        items = []
        for text in texts:
            words = list(tokens(text, self.limit))
            ids = np.array([self.index.get(w, 1) for w in words], "int32")
            items.append(Item(text, ids, words, ids > 1))
        return items

    def _run(self, rows):
        outputs = {}
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            if self.dynamic:
                batch = [
                    np.asarray(r, "int32") if len(r) else np.zeros(1, "int32")
                    for r in chunk
                ]
            else:
                batch = np.zeros((len(chunk), self.limit), "int32")
                for i, r in enumerate(chunk):
                    batch[i, : len(r)] = r[: self.limit]
            out = self.classifier.predict_ids(batch)
            for name, value in out.items():
                outputs.setdefault(name, []).append(np.asarray(value))
        return outputs

    @property
    def outputs(self):
        if self._outputs is None:  # the names, from a one-word probe
            self._outputs = sorted(self._run([np.ones(1, "int32")]))
        return self._outputs

    def run(self, rows, name):
        parts = self._run(rows)[name]
        width = max(m.shape[-1] for m in parts)  # rows of their own length
        return np.concatenate(
            [
                np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, width - m.shape[-1])])
                for m in parts
            ]
        )

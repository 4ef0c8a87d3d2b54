"""Attribution methods and the erasure test, on readers whose answers are
known in closed form (NumPy only), and on the shipped LiteRT files."""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_attn_runtime import attribution as core
from tests.paths import ROOT


class Additive:
    """`P(positive) = 0.5 + Σ w[id]` over the tokens present: a game whose
    Shapley values are the tokens' own weights."""

    attention = None

    def __init__(self, weights, words=None):
        self.w = np.asarray(weights, "float64")
        self.calls = 0

    def read(self, texts):
        items = []
        for text in texts:
            words = text.split()
            ids = np.array([int(w[1:]) for w in words], "int32")
            items.append(core.Item(text, ids, words, np.ones(len(ids), bool)))
        return items

    def probability(self, rows):
        self.calls += 1
        return np.array([0.5 + self.w[np.asarray(r, int)].sum() for r in rows])


class Pairwise(Additive):
    """`P = sigmoid(Σ w[id] + bonus if ids 0 and 1 are both present)`."""

    def probability(self, rows):
        out = []
        for r in rows:
            r = set(np.asarray(r, int).tolist())
            z = self.w[list(r)].sum() + (2.0 if {0, 1} <= r else 0.0)
            out.append(1 / (1 + np.exp(-z)))
        return np.array(out)


def text_of(n):
    return " ".join(f"t{i}" for i in range(n))


WEIGHTS = [0.03, -0.02, 0.05, 0.0, 0.01, -0.04, 0.02]


def test_occlusion_is_the_drop_when_each_token_alone_is_erased():
    reader = Pairwise(WEIGHTS)
    (r,) = core.attribute(reader, text_of(7), method="occlusion")
    ids = np.arange(7)
    full = reader.probability([ids])[0]
    want = [full - reader.probability([np.delete(ids, t)])[0] for t in range(7)]
    np.testing.assert_allclose(r["scores"], want, atol=1e-12)
    assert r["passes"] == 7 and r["method"] == "occlusion"
    assert r["words"] == [f"t{i}" for i in range(7)]


def test_shapley_of_an_additive_game_is_each_tokens_weight():
    (r,) = core.attribute(Additive(WEIGHTS), text_of(7), "shapley", samples=3)
    np.testing.assert_allclose(r["scores"], WEIGHTS, atol=1e-12)
    assert r["passes"] == 3 * (7 + 1)


@pytest.mark.parametrize("samples", [1, 2, 5])
def test_shapley_scores_add_up_to_the_whole_texts_effect(samples):
    reader = Pairwise(WEIGHTS)
    (r,) = core.attribute(reader, text_of(7), "shapley", samples=samples)
    full, empty = reader.probability([np.arange(7), np.arange(0)])
    assert r["scores"].sum() == pytest.approx(full - empty, abs=1e-12)


def test_shapley_with_many_orders_finds_the_exact_values():
    # Exact Shapley values of the pairwise game: the bonus split evenly
    # between tokens 0 and 1 is the only interaction; the rest is additive
    # in the logit, so compute them by enumerating every order (5 tokens).
    w = WEIGHTS[:5]
    reader = Pairwise(w)
    exact = np.zeros(5)
    orders = list(itertools.permutations(range(5)))
    for order in orders:
        present = []
        for t in order:
            before = reader.probability([np.array(present, int)])[0]
            present.append(t)
            exact[t] += reader.probability([np.array(present, int)])[0] - before
    exact /= len(orders)
    (r,) = core.attribute(reader, text_of(5), "shapley", samples=4000)
    np.testing.assert_allclose(r["scores"], exact, atol=0.01)


def test_shapley_is_the_same_for_the_same_seed_only():
    reader = Pairwise(WEIGHTS)
    a, b, c = (
        core.attribute(reader, text_of(7), "shapley", seed=s, samples=3)[0]
        for s in (1, 1, 2)
    )
    np.testing.assert_array_equal(a["scores"], b["scores"])
    assert not np.array_equal(a["scores"], c["scores"])


def test_greedy_ranks_an_additive_games_tokens_by_weight():
    w = np.linspace(-0.04, 0.05, 40)
    np.random.default_rng(0).shuffle(w)
    (r,) = core.attribute(Additive(w), text_of(40), "greedy")
    erased = r["scores"] > 1.0  # scored above every drop: erased in a round
    assert erased.sum() == 20  # rounds of 1, 1, 2, 4, 8, 4 (half the text)
    order = np.argsort(-r["scores"], kind="stable")
    np.testing.assert_array_equal(order, np.argsort(-w, kind="stable"))


def test_greedy_sees_what_leave_one_out_misses():
    """Token B matters only once A is gone (A alone gives 0.94 of 0.95):
    leave one out ranks C (an additive 0.03) above it; greedy erasure,
    having erased A first, sees B's drop of 0.70."""

    g = {(1, 1): 0.95, (1, 0): 0.94, (0, 1): 0.90, (0, 0): 0.2}

    class Masked(Additive):
        def probability(self, rows):
            out = []
            for r in rows:
                r = set(np.asarray(r, int).tolist())
                out.append(g[(int(0 in r), int(1 in r))] + 0.03 * (2 in r))
            return np.array(out)

    reader = Masked(np.zeros(1))
    words = ["t3"] * 100
    words[20], words[5], words[10] = "t0", "t1", "t2"  # A, B, C
    text = " ".join(words)
    (loo,) = core.attribute(reader, text, "occlusion")
    (greedy,) = core.attribute(reader, text, "greedy")
    assert sorted(core.top_positions(loo["scores"], 0.02)) == [10, 20]
    assert sorted(core.top_positions(greedy["scores"], 0.02)) == [5, 20]
    (item,) = reader.read([text])
    e_loo = core.erasure(reader, item, loo["scores"], fractions=(0.02,))
    e_greedy = core.erasure(reader, item, greedy["scores"], fractions=(0.02,))
    assert e_loo["aopc_comprehensiveness"] == pytest.approx(0.08)
    assert e_greedy["aopc_comprehensiveness"] == pytest.approx(0.75)


def test_erasure_follows_eraser_for_either_class():
    # Scores rank t2 > t0 > t6 > ...; the model predicts positive.
    reader = Additive(WEIGHTS)
    (item,) = reader.read([text_of(7)])
    scores = np.array(WEIGHTS)
    e = core.erasure(reader, item, scores, fractions=(0.01, 0.3, 0.5))
    p = 0.5 + sum(WEIGHTS)
    top = {0.01: [2], 0.3: [2, 0], 0.5: [2, 0, 6, 4]}  # round(0.5·7) = 4
    for i, f in enumerate((0.01, 0.3, 0.5)):
        kept = [t for t in range(7) if t not in top[f]]
        erased = 0.5 + sum(WEIGHTS[t] for t in kept)
        only = 0.5 + sum(WEIGHTS[t] for t in top[f])
        assert e["comprehensiveness"][i] == pytest.approx(p - erased)
        assert e["sufficiency"][i] == pytest.approx(p - only)
    assert e["aopc_comprehensiveness"] == pytest.approx(
        np.mean(e["comprehensiveness"])
    )
    # A negative prediction: the drop is in P(negative) = 1 - P.
    negative = Additive([-w for w in WEIGHTS])
    e2 = core.erasure(negative, item, scores, fractions=(0.3,))
    assert e2["comprehensiveness"][0] == pytest.approx(
        e["comprehensiveness"][1]
    )


def test_erase_keeps_the_order_and_ties_rank_the_earlier_first():
    ids = np.array([5, 6, 7, 8])
    np.testing.assert_array_equal(core.erase(ids, [1, 3]), [5, 7])
    np.testing.assert_array_equal(
        core.top_positions([0.0, 1.0, 1.0, 0.0], 0.5), [1, 2]
    )
    assert len(core.top_positions(np.zeros(3), 0.01)) == 1  # at least one


def test_attention_sums_the_hops_and_gives_them():
    hops = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])

    class WithAttention(Additive):
        def attention(self, rows):
            return np.stack([np.pad(hops, ((0, 0), (0, 2)))] * len(rows))

    (r,) = core.attribute(WithAttention(WEIGHTS), text_of(3), "attention")
    np.testing.assert_allclose(r["scores"], hops.sum(0))
    np.testing.assert_allclose(r["hops"], hops)
    assert r["passes"] == 1


def test_bad_arguments_name_themselves():
    reader = Additive(WEIGHTS)
    with pytest.raises(ValueError, match="method='lime'"):
        core.attribute(reader, "t0", method="lime")
    with pytest.raises(ValueError, match="samples=0"):
        core.attribute(reader, "t0 t1", method="shapley", samples=0)
    with pytest.raises(ValueError, match="steps=0"):
        core.attribute(reader, "t0", method="integrated_gradients", steps=0)
    with pytest.raises(ValueError, match="Keras model"):
        core.attribute(reader, "t0", method="gradient_x_input")
    with pytest.raises(ValueError, match="'attention' output"):
        core.attribute(reader, "t0", method="attention")
    with pytest.raises(ValueError, match="Received: int"):
        core.attribute(3, "t0")
    assert core.available(reader) == [
        "occlusion",
        "shapley",
        "greedy",
        "random",
    ]


def test_the_default_is_a_method_every_file_runs():
    assert core.DEFAULT_METHOD in core.available(Additive(WEIGHTS))
    (r,) = core.attribute(Additive(WEIGHTS), text_of(3))
    assert r["method"] == core.DEFAULT_METHOD


def test_the_cli_offers_every_method_but_the_floor():
    from keras_attn_cli.parser import EXPLAIN_METHODS

    assert set(EXPLAIN_METHODS) == set(core.METHODS) - {"random"}


EDGE = os.path.join(ROOT, "saved_models", "imdb_edge", "model_full_int8.tflite")


@pytest.mark.skipif(not os.path.isfile(EDGE), reason="no shipped edge model")
def test_the_edge_files_default_map_of_a_short_text_is_not_flat():
    from keras_attn_runtime import LiteRTClassifier

    clf = LiteRTClassifier(EDGE)
    (r,) = core.attribute(clf, "a great film")
    assert r["words"] == ["a", "great", "film"]
    assert np.ptp(r["scores"]) > 0.1
    assert r["words"][int(np.argmax(r["scores"]))] == "great"
    # Leave one out, row by row through the file, equals the same by hand.
    (r,) = core.attribute(clf, "a great film", "occlusion")
    rows = np.zeros((3, clf.tokenizer.length), "int32")
    ids = clf.tokenizer(["a great film"])[0][:3]
    for t in range(3):
        kept = np.delete(ids, t)
        rows[t, : len(kept)] = kept
    p = clf.predict_ids(rows)["probability"][:, 0]
    assert r["probability"] > 0.5
    np.testing.assert_allclose(r["scores"], r["probability"] - p, atol=1e-6)


def test_the_module_imports_neither_keras_nor_tensorflow():
    code = (
        "import sys, keras_attn_runtime.attribution\n"
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_cli_help_names_the_default():
    from keras_attn_cli.parser import build_parser

    parser = build_parser()
    (commands,) = [
        a
        for a in parser._actions
        if getattr(a, "choices", None) and "explain" in a.choices
    ]
    text = " ".join(commands.choices["explain"].format_help().split())
    assert f"default: {core.DEFAULT_METHOD}," in text

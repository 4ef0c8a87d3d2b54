"""
Title: English→French translation with an attention decoder
Author: keras_attn contributors
Description: A GRU encoder, a `keras_attn.seq2seq.AttentionDecoder`, beam
search inside the exported graph, cased French with numbers and names
copied through attention, and a LiteRT model that translates in one call.

Run it: `python examples/translation.py --out saved_models` (at most 30
minutes on two CPU cores; `--limit 2000 --epochs 1` for a quick look).
Results: docs/results.md.
"""

"""
## Introduction

A bidirectional GRU reads the English sentence. The decoder is an
`AttentionDecoder` (Luong et al. 2015, https://arxiv.org/abs/1508.04025): a
GRU cell steps over the French prefix, attends over the encoder states and
outputs `s̃_t = tanh(W_c [a_t; s_t])`, from which the next word is
predicted. For training it runs over whole sentences (the cell first, then
one batched attention call); for search, one token at a time.
"""

import argparse
import collections
import json
import os
import re
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_attn import seq2seq
from keras_attn.seq2seq import AttentionDecoder
from keras_attn.text import split_sentence

START, END, UNK = "[start]", "[end]", "[UNK]"
DEFAULT_PAIRS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    *"../../shared/data/translation/pairs.tsv".split("/"),
)
# The settings of the shipped `saved_models/translation_en_fr`.
HPARAMS = {
    "score": "additive",  # or "dot", "general", "low_rank"
    "epochs": 40,
    "batch_size": 64,
    "units": 256,
    "embed_dim": 128,
    "rank": 64,  # for "low_rank"
    "dropout": 0.2,
    "learning_rate": 2e-3,
    "label_smoothing": 0.1,
    "source_length": 16,
    "target_length": 24,
    "max_tokens": 10000,
    "val_fraction": 0.1,
    "beam_width": 4,
    "length_penalty": 0.6,
    "coverage_penalty": 0.2,
    "time_limit": 28 * 60,  # seconds of training at most
    "seed": 1337,
}

"""
## Load the data

A TSV of `English<TAB>French` pairs (Tatoeba). We split by English
sentence, so that no validation sentence is seen in training, and keep
every French translation of a sentence as a BLEU reference.
"""


def load_pairs(path, limit=None):
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"No sentence pairs at {path!r}: pass --pairs FILE (English<TAB>"
            "French per line; fra-eng from https://www.manythings.org/anki/)"
        )
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return [(r[0], r[1]) for r in rows if len(r) > 1 and r[0] and r[1]][:limit]


def split_by_english(pairs, val_fraction, seed):
    """Train/validation pairs, no English sentence on both sides."""
    english = sorted({en for en, _ in pairs})
    order = np.random.default_rng(seed).permutation(len(english))
    cut = max(1, int(len(english) * val_fraction))
    val_set = {english[i] for i in order[:cut]}
    train = [p for p in pairs if p[0] not in val_set]
    return train, [p for p in pairs if p[0] in val_set]


"""
## Vectorize, keeping the case

`split_sentence` splits off punctuation, keeps the apostrophe with the
word before it (`l'` `homme`) and keeps the case. Words with a digit never
enter a vocabulary: numbers (and rare names) become `[UNK]` on both sides,
the model learns to put an `[UNK]` where the source has one, and the
translator copies the source word its attention points at (unknown-word
replacement, Luong et al. 2015).
"""


def vocabulary(texts, max_tokens, extra=()):
    """The most frequent words that hold no digit, after `extra`."""
    split = split_sentence(tf.constant(texts)).numpy()
    counts = collections.Counter(w for t in split for w in t.decode().split())
    kept = [w for w, _ in counts.most_common() if not re.search(r"\d", w)]
    return list(extra) + kept[: max_tokens - 2 - len(extra)]


def make_vectorizers(train, hp):
    en = keras.layers.TextVectorization(
        standardize=split_sentence,
        output_sequence_length=hp["source_length"],
        vocabulary=vocabulary([p[0] for p in train], hp["max_tokens"]),
        name="source_vectorizer",
    )
    fr = keras.layers.TextVectorization(
        standardize=None,
        split="whitespace",
        output_sequence_length=hp["target_length"] + 1,
        vocabulary=vocabulary(
            [p[1] for p in train], hp["max_tokens"], (START, END)
        ),
        name="target_vectorizer",
    )
    return en, fr


def target_text(french):
    return tf.strings.join(
        [START, split_sentence(tf.constant(french)), END], " "
    )


def make_dataset(vec_en, vec_fr, pairs, batch_size, seed=None):
    return seq2seq.teacher_forcing_dataset(
        vec_en(tf.constant([p[0] for p in pairs])),
        vec_fr(target_text([p[1] for p in pairs])),
        batch_size,
        seed,
    )


"""
## Build the model

The training model runs the decoder over whole target sentences (teacher
forcing); `encode` and `step_fn` reuse its layers one token at a time, in
the form `keras_attn.seq2seq`'s searches take. The output layer reuses the
target embedding (`W_y = E P`, Press & Wolf 2017).
"""


class TiedOutput(keras.layers.Layer):
    """Logits `x Eᵀ + b` from an `Embedding`'s matrix `E` `(V, e)`."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(
            shape=(self.embedding.input_dim,), initializer="zeros", name="bias"
        )

    def call(self, x):
        kernel = ops.transpose(self.embedding.embeddings)  # (e, V)
        return ops.matmul(x, ops.cast(kernel, x.dtype)) + self.bias


def build_models(src_vocab, tgt_vocab, hp):
    u, e = hp["units"], hp["embed_dim"]
    src = keras.Input((None,), dtype="int32", name="source")
    x = keras.layers.Embedding(src_vocab, e, mask_zero=True)(src)
    x = keras.layers.Dropout(hp["dropout"])(x)
    memory, fwd, bwd = keras.layers.Bidirectional(
        keras.layers.GRU(u // 2, return_sequences=True, return_state=True)
    )(x)  # memory: (B, S, u)
    state = keras.layers.Dense(u, activation="tanh", name="bridge")(
        keras.layers.Concatenate()([fwd, bwd])
    )
    encoder = keras.Model(src, [memory, state], name="encoder")

    embed = keras.layers.Embedding(tgt_vocab, e, mask_zero=True)
    decoder = AttentionDecoder(
        keras.layers.GRUCell(u),
        score=hp["score"],
        units=u,
        rank=hp["rank"],
        attentional_units=u,
        name="decoder",
    )
    head = keras.Sequential(
        [
            keras.layers.LayerNormalization(),
            keras.layers.Dropout(hp["dropout"]),
            keras.layers.Dense(e, use_bias=False),
            TiedOutput(embed),
        ],
        name="head",
    )
    tgt = keras.Input((None,), dtype="int32", name="target_in")
    outputs, _, _ = decoder(embed(tgt), memory, initial_state=[state])
    trainer = keras.Model([src, tgt], head(outputs), name="translator")

    def encode(source):
        memory, state = encoder(source, training=False)
        return {"cell": [state], "memory": memory, "mask": source != 0}

    def step_fn(tokens, state, index):
        out, cell, align = decoder.step(
            embed(tokens), state["cell"], state["memory"], state["mask"]
        )
        logits = head(out[:, None], training=False)[:, 0]  # (B, V)
        return logits, {**state, "cell": cell}, align

    return trainer, encode, step_fn


"""
## Train

`seq2seq.SequenceLoss`: per-token cross-entropy with label smoothing,
zero at padding. Early stopping on validation loss, a halved learning rate
on plateaus, and a time budget: no epoch starts that would end past it.
"""


class TimeLimit(keras.callbacks.Callback):
    def __init__(self, limit):
        super().__init__()
        self.end, self.epoch_start = time.time() + limit, time.time()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = time.time()

    def on_epoch_end(self, epoch, logs=None):  # would the next one fit?
        now = time.time()
        self.model.stop_training = 2 * now - self.epoch_start > self.end


def train(trainer, vec_en, vec_fr, train_pairs, val_pairs, hp, verbose):
    trainer.compile(
        optimizer=keras.optimizers.Adam(hp["learning_rate"], clipnorm=1.0),
        loss=seq2seq.SequenceLoss(label_smoothing=hp["label_smoothing"]),
        weighted_metrics=["accuracy"],
    )
    start = time.time()
    history = trainer.fit(
        make_dataset(vec_en, vec_fr, train_pairs, hp["batch_size"], hp["seed"]),
        validation_data=make_dataset(vec_en, vec_fr, val_pairs, 512),
        epochs=hp["epochs"],
        verbose=verbose,
        callbacks=[
            keras.callbacks.EarlyStopping(
                patience=2, restore_best_weights=True
            ),
            keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=1),
            TimeLimit(hp["time_limit"]),
        ],
    ).history
    return history, time.time() - start


"""
## Translate and evaluate

`seq2seq.Translator` wraps `encode` and `step_fn` in a `tf.Module` whose
searches run in the graph, so they ship inside the SavedModel: strings in;
translation, tokens and alignment out. An `[UNK]` in the output becomes the
source word with the highest attention weight.

`seq2seq.translation_scores` gives the headline, cased corpus BLEU
(sacrebleu, 13a) against every reference of each validation sentence, with
lowercased BLEU and exact matches.
"""


def evaluate(translator, pairs, greedy=False):
    """Scores on `pairs` and the (English, translation) list."""
    refs = collections.defaultdict(list)
    for en, fr in pairs:
        refs[en].append(fr)
    sentences = sorted(refs)
    hyps = translator.translate_texts(sentences, greedy)
    scores = seq2seq.translation_scores(hyps, [refs[s] for s in sentences])
    return scores, list(zip(sentences, hyps, strict=True))


"""
## Export

`Translator.save` writes the folder `keras-attn translate` reads: the
SavedModel with both searches, the vocabularies, and a LiteRT file holding
greedy decoding as one `translate` signature (the loop is a builtin
`WHILE`): one call per sentence. We check it agrees with the SavedModel.
"""


def export(folder, translator, sentences):
    from keras_attn.export import tflite_op_names
    from keras_attn.litert_runtime import LiteRTTranslator

    path = os.path.join(translator.save(folder), "model.tflite")
    keras_out = translator.translate_texts(sentences, greedy=True)
    lite, start = LiteRTTranslator(path), time.perf_counter()
    lite_out = [lite.translate(s) for s in sentences]
    seconds = (time.perf_counter() - start) / len(sentences)
    same = np.mean([a == b for a, b in zip(lite_out, keras_out, strict=True)])
    return {
        "size_bytes": os.path.getsize(path),
        "ops": tflite_op_names(path),
        "greedy_agreement_with_keras": float(same),
        "latency_ms_per_sentence": round(1000 * seconds, 2),
        "sentences": len(sentences),
    }


def main(
    pairs=DEFAULT_PAIRS,
    limit=None,
    out=None,
    weights=None,
    verbose=2,
    build=None,
    name="translation_en_fr",
    **overrides,
):
    """Train (or load `weights`), evaluate on validation, export to
    `out/name`. `build` defaults to `build_models`; `overrides` replace
    `HPARAMS` entries."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    train_pairs, val_pairs = split_by_english(
        load_pairs(pairs, limit), hp["val_fraction"], hp["seed"]
    )
    vec_en, vec_fr = make_vectorizers(train_pairs, hp)
    trainer, encode, step_fn = (build or build_models)(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    history, wall = {}, None
    if weights and os.path.isfile(weights):
        trainer.load_weights(weights)
    else:
        history, wall = train(
            trainer, vec_en, vec_fr, train_pairs, val_pairs, hp, verbose
        )
        if weights:
            trainer.save_weights(weights)
    search = ("beam_width", "length_penalty", "coverage_penalty")
    translator = seq2seq.Translator(
        vec_en,
        vec_fr.get_vocabulary(),
        encode,
        step_fn,
        hp["target_length"],
        trackable=trainer,
        standardize=split_sentence,
        **{k: hp[k] for k in search},
    )
    beam, examples = evaluate(translator, val_pairs)
    metrics = {
        "model": name,
        "data": os.path.basename(pairs),
        "split": {"pairs_train": len(train_pairs), "pairs_val": len(val_pairs)},
        "hyperparameters": hp,
        "parameters": trainer.count_params(),
        "history": {
            k: [round(float(v), 4) for v in vs] for k, vs in history.items()
        },
        "train_wall_time_s": wall and round(wall, 1),
        "val_beam": beam,
        "val_greedy": evaluate(translator, val_pairs, greedy=True)[0],
        "examples": examples[:10],
        "bleu": "sacrebleu corpus_bleu, 13a, all references; cased headline",
        "versions": [tf.__version__, keras.__version__, sys.version[:6]],
    }
    print(f"{name}: val BLEU {beam['bleu_cased']:.2f} (cased, beam search)")
    if out:
        folder = os.path.join(out, name)
        metrics["litert"] = export(folder, translator, [s for s, _ in examples])
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics, translator


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--pairs", default=DEFAULT_PAIRS)
    parser.add_argument("--out", help="write the model folder under OUT")
    parser.add_argument("--weights", help="load (or save after training)")
    parser.add_argument("--limit", type=int, help="use the first N pairs")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    return parser


if __name__ == "__main__":
    parser = parse_args(__doc__.split("\n")[1])
    scores = ["additive", "dot", "general", "low_rank"]
    parser.add_argument("--score", default="additive", choices=scores)
    parser.add_argument(
        "--time-limit", type=int, default=HPARAMS["time_limit"], help="s"
    )
    main(**vars(parser.parse_args()))

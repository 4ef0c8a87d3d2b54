"""
Title: English→French translation with Bahdanau attention
Author: keras_attn contributors
Description: A GRU encoder-decoder whose decoder attends with
`keras_attn.Attention`, greedy and beam search inside an exported
SavedModel, and a LiteRT model a phone can run.

Run it: `python examples/translation.py --out saved_models` (at most 30
minutes on two CPU cores; `--limit 2000 --epochs 1` for a quick look).
Results: docs/results.md.
"""

"""
## Introduction

The encoder reads the English sentence with a bidirectional GRU. The
decoder (Luong et al. 2015, https://arxiv.org/abs/1508.04025) runs a GRU
over the French prefix, attends over the encoder states with the chosen
score, and predicts the next word from `s̃_t = tanh(W_c [a_t; s_t])`.
Attention sits on top of the decoder GRU (no input feeding), so training
runs over whole sentences at once (teacher forcing).
"""

import argparse
import json
import os
import platform
import time

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_attn import Attention, seq2seq
from keras_attn.text import standardize_sentence

START, END = "[start]", "[end]"
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
    "source_length": 12,
    "target_length": 20,
    "max_tokens": 8000,
    "val_fraction": 0.1,
    "beam_width": 4,
    "length_penalty": 0.6,
    "time_limit": 30 * 60,  # seconds of training at most
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
            f"No sentence pairs at {path!r}. Download fra-eng from "
            "https://www.manythings.org/anki/ (Tatoeba) and pass "
            "--pairs FILE (English<TAB>French per line)."
        )
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0] and parts[1]:
                pairs.append((parts[0], parts[1]))
            if limit and len(pairs) >= limit:
                break
    return pairs


def split_by_english(pairs, val_fraction, seed):
    """Train/validation pairs, no English sentence on both sides."""
    english = sorted({en for en, _ in pairs})
    order = np.random.default_rng(seed).permutation(len(english))
    val_set = {
        english[i] for i in order[: max(1, int(len(english) * val_fraction))]
    }
    train = [p for p in pairs if p[0] not in val_set]
    return train, [p for p in pairs if p[0] in val_set]


def references(pairs):
    """English sentence → all its French translations (order kept)."""
    refs = {}
    for en, fr in pairs:
        refs.setdefault(en, []).append(fr)
    return refs


"""
## Vectorize

`standardize_sentence` lowercases, splits off punctuation and keeps
apostrophes with the word before them (`l'` `homme`). French targets are
wrapped in `[start]` … `[end]`. Batches group sentences of similar length
and are cut to their longest sentence: Tatoeba sentences are short.
"""


def target_text(french):
    std = standardize_sentence(tf.constant(french))
    return tf.strings.join([START, std, END], separator=" ")


def make_vectorizers(train, hp):
    en = keras.layers.TextVectorization(
        max_tokens=hp["max_tokens"],
        standardize=standardize_sentence,
        output_sequence_length=hp["source_length"],
        name="source_vectorizer",
    )
    en.adapt(tf.constant([p[0] for p in train]), batch_size=2048)
    fr = keras.layers.TextVectorization(
        max_tokens=hp["max_tokens"],
        standardize=None,
        output_sequence_length=hp["target_length"] + 1,
        name="target_vectorizer",
    )
    fr.adapt(target_text([p[1] for p in train]), batch_size=2048)
    return en, fr


def make_dataset(vec_en, vec_fr, pairs, batch_size, seed=None):
    src = vec_en(tf.constant([p[0] for p in pairs]))
    tgt = vec_fr(target_text([p[1] for p in pairs]))
    ds = tf.data.Dataset.from_tensor_slices((src, tgt))
    if seed is not None:
        ds = ds.shuffle(len(pairs), seed=seed)
    ds = ds.bucket_by_sequence_length(
        lambda s, t: tf.cast(tf.math.count_nonzero(t), tf.int32),
        bucket_boundaries=[5, 7, 9, 12],
        bucket_batch_sizes=[batch_size] * 5,
    )

    def trim(s, t):  # cut to the batch's longest; shift the target by one
        s = s[:, : tf.reduce_max(tf.math.count_nonzero(s, axis=1))]
        t = t[:, : tf.reduce_max(tf.math.count_nonzero(t, axis=1))]
        return (s, t[:, :-1]), t[:, 1:]

    return ds.map(trim).prefetch(tf.data.AUTOTUNE)


"""
## Build the model

Three models share one set of layers: the training model (whole target
sentences), the encoder, and a one-step decoder for inference. The output
layer reuses the target embedding (`W_y = E P`, Press & Wolf 2017), and a
layer normalization of `s̃` speeds learning several times (validation loss
2.03 against 4.35 after two epochs on 20,000 pairs).
"""


class TiedOutput(keras.layers.Layer):
    """Logits `x Eᵀ + b` from an `Embedding`'s matrix `E` `(V, e)`."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        self.supports_masking = True

    def build(self, input_shape):
        self.bias = self.add_weight(
            shape=(self.embedding.input_dim,), initializer="zeros", name="bias"
        )

    def call(self, x):
        kernel = ops.transpose(self.embedding.embeddings)  # (e, V)
        return ops.matmul(x, ops.cast(kernel, x.dtype)) + self.bias


def build_models(src_vocab, tgt_vocab, hp):
    u, e = hp["units"], hp["embed_dim"]
    src = keras.Input((None,), dtype="int64", name="source")
    x = keras.layers.Embedding(src_vocab, e, mask_zero=True)(src)
    x = keras.layers.Dropout(hp["dropout"])(x)
    memory, fwd, bwd = keras.layers.Bidirectional(
        keras.layers.GRU(u // 2, return_sequences=True, return_state=True),
        name="encoder_gru",
    )(x)  # memory: (B, S, u)
    state0 = keras.layers.Dense(u, activation="tanh", name="bridge")(
        keras.layers.Concatenate()([fwd, bwd])
    )
    encoder = keras.Model(src, [memory, state0], name="encoder")

    tgt_embed = keras.layers.Embedding(tgt_vocab, e, mask_zero=True)
    gru = keras.layers.GRU(
        u, return_sequences=True, return_state=True, name="decoder_gru"
    )
    attention = Attention(
        score=hp["score"], units=u, rank=hp["rank"], name="attention"
    )
    combine = keras.layers.Dense(u, activation="tanh", name="W_c")
    norm = keras.layers.LayerNormalization(name="norm")
    to_embedding = keras.layers.Dense(e, use_bias=False, name="P")
    tied = TiedOutput(tgt_embed, name="W_y")
    drop = keras.layers.Dropout(hp["dropout"])

    def decode(y_ids, state, memory, memory_mask=None):
        s, new_state = gru(tgt_embed(y_ids), initial_state=state)  # (B, T, u)
        a, w = attention(
            s, memory, value_mask=memory_mask, return_attention_scores=True
        )  # a: (B, T, u), w: (B, T, S)
        s_tilde = combine(keras.layers.Concatenate()([a, s]))
        return tied(to_embedding(drop(norm(s_tilde)))), new_state, w

    tgt_in = keras.Input((None,), dtype="int64", name="target_in")
    mem, st = encoder(src)
    logits, _, _ = decode(tgt_in, st, mem, ops.not_equal(src, 0))
    trainer = keras.Model([src, tgt_in], logits, name="seq2seq")

    prev = keras.Input((1,), dtype="int64", name="prev")
    state_in = keras.Input((u,), name="state")
    mem_in = keras.Input((None, u), name="memory")
    mask_in = keras.Input((None,), dtype="bool", name="memory_mask")
    step_logits, step_state, step_w = decode(prev, state_in, mem_in, mask_in)
    step = keras.Model(
        [prev, state_in, mem_in, mask_in],
        [step_logits[:, 0], step_state, step_w[:, 0]],
        name="decoder_step",
    )
    return trainer, encoder, step


"""
## Train

Per-token cross-entropy with label smoothing, zero at padding; early
stopping on validation loss, a halved learning rate on plateaus, and a time
budget: no epoch starts that would end past it.
"""


def smoothed_loss(vocab_size, epsilon):
    def loss(y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        per_token = keras.losses.categorical_crossentropy(
            ops.one_hot(y_true, vocab_size),
            y_pred,
            from_logits=True,
            label_smoothing=epsilon,
        )  # (B, T)
        return per_token * ops.cast(ops.not_equal(y_true, 0), "float32")

    return loss


class TimeLimit(keras.callbacks.Callback):
    def __init__(self, start, limit):
        super().__init__()
        self.start, self.limit, self.epoch_start = start, limit, start

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        if now + (now - self.epoch_start) > self.start + self.limit:
            self.model.stop_training = True


"""
## Translate: greedy and beam search in the graph

`keras_attn.seq2seq.Translator` wraps the encoder and the one-step decoder
in a `tf.Module` whose searches (`keras_attn.decoding`) run in the graph,
so they ship inside the SavedModel: strings in, translation, tokens and
alignment out. The unknown-word token is never emitted.
"""


"""
## Evaluate

Corpus BLEU (sacrebleu, 13a tokenization, lowercased) against every
reference of each validation sentence, and the share of exact matches.
"""


def evaluate(translate_fn, refs, sentences, batch=256):
    import sacrebleu

    hyps = []
    for i in range(0, len(sentences), batch):
        out = translate_fn(tf.constant(sentences[i : i + batch]))
        hyps.extend(t.decode("utf-8") for t in out["translation"].numpy())
    ref_lists = [refs[s] for s in sentences]
    streams = [
        [r[j] if j < len(r) else None for r in ref_lists]
        for j in range(max(len(r) for r in ref_lists))
    ]
    bleu = sacrebleu.corpus_bleu(hyps, streams, lowercase=True)

    def norm(texts):
        return [
            t.decode() for t in standardize_sentence(tf.constant(texts)).numpy()
        ]

    exact = np.mean(
        [h in set(norm(r)) for h, r in zip(norm(hyps), ref_lists, strict=True)]
    )
    return float(bleu.score), float(exact), hyps


"""
## Export for a phone

LiteRT cannot hold the string preprocessing or the search loop, so the
`.tflite` has two signatures, `encode` and one decoder `step`, and
`keras_attn.litert_runtime.LiteRTTranslator` drives greedy decoding in
NumPy. We check that it agrees with the SavedModel's greedy search.
"""


def export_litert(folder, encoder, step, translator, sentences, hp):
    from keras_attn.export import tflite_op_names
    from keras_attn.litert_runtime import LiteRTTranslator

    path = os.path.join(folder, "model.tflite")
    seq2seq.export_tflite(encoder, step, path, hp["source_length"])
    lite = LiteRTTranslator(path, max_length=hp["target_length"])
    keras_out = []
    for i in range(0, len(sentences), 256):
        out = translator.translate_greedy(tf.constant(sentences[i : i + 256]))
        keras_out.extend(t.decode() for t in out["translation"].numpy())
    same = [
        lite.translate(x) == k
        for x, k in zip(sentences, keras_out, strict=True)
    ]
    return {
        "size_bytes": os.path.getsize(path),
        "ops": tflite_op_names(path),
        "greedy_agreement_with_keras": float(np.mean(same)),
        "sentences": len(sentences),
    }


def save(folder, translator, vec_en, vec_fr):
    os.makedirs(folder, exist_ok=True)
    translator.export(os.path.join(folder, "saved_model"))
    for name, vec in (("source", vec_en), ("target", vec_fr)):
        path = os.path.join(folder, f"{name}_vocabulary.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(vec.get_vocabulary()) + "\n")


def main(
    pairs=DEFAULT_PAIRS,
    limit=None,
    eval_sentences=None,
    out=None,
    verbose=2,
    **overrides,
):
    """Train, evaluate, save; `overrides` replace `HPARAMS` entries."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    train, val = split_by_english(
        load_pairs(pairs, limit), hp["val_fraction"], hp["seed"]
    )
    start = time.time()
    vec_en, vec_fr = make_vectorizers(train, hp)
    trainer, encoder, step = build_models(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), hp
    )
    trainer.compile(
        optimizer=keras.optimizers.Adam(hp["learning_rate"], clipnorm=1.0),
        loss=smoothed_loss(vec_fr.vocabulary_size(), hp["label_smoothing"]),
        weighted_metrics=["accuracy"],
    )
    history = trainer.fit(
        make_dataset(vec_en, vec_fr, train, hp["batch_size"], hp["seed"]),
        validation_data=make_dataset(vec_en, vec_fr, val, 512),
        epochs=hp["epochs"],
        verbose=verbose,
        callbacks=[
            keras.callbacks.EarlyStopping(
                patience=2, restore_best_weights=True
            ),
            keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=1),
            TimeLimit(start, hp["time_limit"]),
        ],
    ).history
    wall = time.time() - start
    translator = seq2seq.Translator(
        vec_en,
        vec_fr.get_vocabulary(),
        encoder,
        step,
        hp["target_length"],
        hp["beam_width"],
        hp["length_penalty"],
    )
    refs = references(val)
    sentences = sorted(refs)[:eval_sentences]
    bleu, exact, hyps = evaluate(translator.translate, refs, sentences)
    g_bleu, g_exact, _ = evaluate(translator.translate_greedy, refs, sentences)
    metrics = {
        "score": hp["score"],
        "data": os.path.basename(pairs),
        "split": {
            "pairs_train": len(train),
            "pairs_val": len(val),
            "english_val": len(refs),
            "by": "English sentence",
        },
        "hyperparameters": hp,
        "epochs_run": len(history["loss"]),
        "history": {
            k: [round(float(v), 4) for v in vs] for k, vs in history.items()
        },
        "train_wall_time_s": round(wall, 1),
        "val_sentences_evaluated": len(sentences),
        "val_bleu_beam": bleu,
        "val_exact_match_beam": exact,
        "val_bleu_greedy": g_bleu,
        "val_exact_match_greedy": g_exact,
        "bleu": "sacrebleu corpus_bleu, 13a, lowercase=True, all refs",
        "examples": [
            list(x) for x in zip(sentences[:8], hyps[:8], strict=False)
        ],
        "versions": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
        },
    }
    print(f"BLEU beam {bleu:.2f}, greedy {g_bleu:.2f}, {wall:.0f} s")
    if out:
        folder = os.path.join(out, "translation_en_fr")
        save(folder, translator, vec_en, vec_fr)
        metrics["litert"] = export_litert(
            folder, encoder, step, translator, sentences, hp
        )
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics, translator, (encoder, step, vec_en, vec_fr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--pairs", default=DEFAULT_PAIRS)
    parser.add_argument("--out", help="write OUT/translation_en_fr/")
    parser.add_argument("--limit", type=int, help="use the first N pairs")
    parser.add_argument("--epochs", type=int, default=HPARAMS["epochs"])
    parser.add_argument(
        "--score",
        default="additive",
        choices=["additive", "dot", "general", "low_rank"],
    )
    args = parser.parse_args()
    main(
        args.pairs,
        args.limit,
        out=args.out,
        epochs=args.epochs,
        score=args.score,
    )

"""
Title: English→French translation with an attention decoder
Author: keras_attn contributors
Description: A GRU encoder, a `keras_attn.seq2seq.AttentionDecoder`, beam
search inside the exported graph, cased French with numbers and names
copied through attention, and a LiteRT model that translates in one call.

Run it: `python recipes/translation.py --out saved_models` (at most 30
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
import json
import os
import tempfile
import time

import keras
import tensorflow as tf
from keras import ops

from keras_attn import seq2seq
from keras_attn.export import versions
from keras_attn.seq2seq import AttentionDecoder
from keras_attn.text import split_sentence
from keras_attn.training.callbacks import TimeBudget
from keras_attn.translation import (
    Translator,
    read_pairs,
    references,
    split_by_source,
    teacher_forcing_dataset,
    translation_scores,
    word_vocabulary,
)
from keras_attn.translation.subwords import (
    WordPieceVectorizer,
    wordpiece_vocabulary,
)
from keras_attn_runtime import DETOKENIZERS

START, END = "[start]", "[end]"
DEFAULT_PAIRS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    *"../../shared/data/translation/pairs.tsv".split("/"),
)
# The settings of the shipped `saved_models/translation_en_fr`.
HPARAMS = {
    "score": ["additive", "general", "low_rank"],  # member k: score[k]
    "members": 3,  # models trained side by side, decoded as an ensemble
    "int8_weights": True,  # int8 Embedding/Dense; dynamic-range LiteRT
    "epochs": 60,
    "batch_size": 64,
    "units": 256,
    "embed_dim": 128,
    "rank": 64,  # for "low_rank"
    "dropout": 0.3,
    "learning_rate": 2e-3,
    "label_smoothing": 0.1,
    "subwords": True,  # WordPiece units; words with --no-subwords
    "source_length": 64,  # tokens read (a 40-word sentence fits)
    "target_length": 80,  # tokens written at most
    "max_tokens": 8000,
    "val_fraction": 0.1,
    "beam_width": 4,
    "litert_search": "beam",  # inside the LiteRT file: "beam" or "greedy"
    "length_penalty": 0.6,
    "coverage_penalty": 0.2,
    "copy_bonus": 1.5,  # added to [UNK]'s logit when the source has one
    # Inputs over 8 words (the training sentences have at most 7) are cut
    # into sentences and clauses, translated one by one.
    "segmenter": "english_clauses",
    "segment_longer_than": 8,
    "time_limit": 80 * 60,  # seconds of training at most
    "seed": 1337,
}

"""
## Prepare the data

A TSV of `English<TAB>French` pairs (Tatoeba). `split_by_source`
holds out whole English sentences (never seen in training) with every
French translation of each as a BLEU reference. `split_sentence` splits
off punctuation, keeps the apostrophe with the word before it (`l'`
`homme`) and keeps the case. `word_vocabulary` leaves out words
with a digit: numbers (and rare names) become `[UNK]` on both sides, the
model learns to put an `[UNK]` where the source has one, and the
translator copies the source word its attention points at (unknown-word
replacement, Luong et al. 2015).
"""


def make_vectorizers(train, hp, saved=None, fresh=False):
    """English (raw text in) and French (split text in) vectorizers."""
    if hp["subwords"]:
        return make_subword_vectorizers(train, hp, saved, fresh)

    def words(texts, reserved=()):
        n = hp["max_tokens"]
        return word_vocabulary(texts, n, split_sentence, reserved)

    en = keras.layers.TextVectorization(
        standardize=split_sentence,
        output_sequence_length=hp["source_length"],
        vocabulary=words([p[0] for p in train]),
    )
    fr = keras.layers.TextVectorization(
        standardize=None,
        output_sequence_length=hp["target_length"] + 1,
        vocabulary=words([p[1] for p in train], (START, END)),
    )
    return en, fr


"""
Word vocabularies leave every word outside the 10,000 most frequent as
`[UNK]`: copied from the source, an English word ends up in the French
("Le chat sleeps"). WordPiece units (`keras_attn.translation.subwords`)
spell a rare word from pieces (`sleep ##s`, `canap ##é`), so the model
writes French for it. Words with a digit still become `[UNK]` and are
copied (numbers are never translated). The vocabularies are learned from
the training pairs with Hugging Face's `tokenizers`; the vectorizer
applies them in the TensorFlow graph, the edge runtime with NumPy.
"""


def make_subword_vectorizers(train, hp, saved=None, fresh=False):
    """`tokenizers` may break ties differently from one run to the next,
    so the vocabularies are kept beside the weights (`saved`, a JSON file,
    learned anew when `fresh`) and read back with them."""
    vocabs = {}
    if saved and not fresh and os.path.isfile(saved):
        with open(saved, encoding="utf-8") as f:
            vocabs = json.load(f)
    for side, name, reserved in (
        (0, "source", ()),
        (1, "target", (START, END)),
    ):
        if name not in vocabs:
            vocabs[name] = wordpiece_vocabulary(
                [p[side] for p in train],
                hp["max_tokens"],
                split_sentence,
                reserved,
            )
    if saved:
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(vocabs, f, ensure_ascii=False)
    en = WordPieceVectorizer(
        vocabs["source"], split_sentence, hp["source_length"]
    )
    fr = WordPieceVectorizer(vocabs["target"], None, hp["target_length"] + 1)
    return en, fr


def make_dataset(vec_en, vec_fr, pairs, batch_size, seed=None, members=1):
    french = split_sentence(tf.constant([p[1] for p in pairs]))
    ds = teacher_forcing_dataset(
        vec_en(tf.constant([p[0] for p in pairs])),
        vec_fr(tf.strings.join([START, french, END], " ")),
        batch_size,
        seed,
    )  # one copy of the targets per ensemble member
    return ds.map(lambda x, y: (x, (y,) * members)) if members > 1 else ds


"""
## Build the model

The training model runs the decoder over whole target sentences (teacher
forcing); `encode` and `step_fn` reuse its layers one token at a time, in
the form `keras_attn.seq2seq`'s searches take; `encode` also projects the
memory for the score once (`AttentionDecoder.memory_keys`), which each
step would otherwise do again. The output layer reuses the
target embedding (`W_y = E P`, Press & Wolf 2017). With `members > 1`
several such models train side by side, each on its own loss, and
`seq2seq.ensemble` decodes with the mean of their probabilities.
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
        table = ops.cast(self.embedding.embeddings, x.dtype)  # (V, e)
        logits = ops.matmul(x, ops.transpose(table))
        mode = self.embedding.quantization_mode
        if mode == "int8":  # Keras keeps round(E·s) and s
            logits = logits / self.embedding.embeddings_scale
        elif mode is not None:
            raise NotImplementedError(f"TiedOutput reads int8, not {mode}")
        return logits + self.bias


def build_member(src, tgt, src_vocab, tgt_vocab, hp, k=0):
    """Member `k`: its training logits, `encode` and `step_fn`."""
    u, e, suffix = hp["units"], hp["embed_dim"], f"_{k}" if k else ""
    scores = [hp["score"]] if isinstance(hp["score"], str) else hp["score"]
    # The padding masks go to each layer by name, not through Keras's
    # implicit propagation (which RNN layers may stop doing).
    src_mask = keras.ops.not_equal(src, 0)  # (B, S)
    tgt_mask = keras.ops.not_equal(tgt, 0)  # (B, T)
    x = keras.layers.Embedding(src_vocab, e, mask_zero=True)(src)
    x = keras.layers.Dropout(hp["dropout"])(x)
    memory, fwd, bwd = keras.layers.Bidirectional(
        keras.layers.GRU(u // 2, return_sequences=True, return_state=True)
    )(x, mask=src_mask)  # memory: (B, S, u)
    state = keras.layers.Dense(u, activation="tanh", name="bridge" + suffix)(
        keras.layers.Concatenate()([fwd, bwd])
    )
    encoder = keras.Model(src, [memory, state], name="encoder" + suffix)
    embed = keras.layers.Embedding(tgt_vocab, e, mask_zero=True)
    decoder = AttentionDecoder(
        keras.layers.GRUCell(u),
        score=scores[k % len(scores)],  # a list of scores is cycled
        units=u,
        rank=hp["rank"],
        attentional_units=u,
        name="decoder" + suffix,
    )
    head = keras.Sequential(
        [
            keras.layers.LayerNormalization(),
            keras.layers.Dropout(hp["dropout"]),
            keras.layers.Dense(e, use_bias=False),
            TiedOutput(embed),
        ],
        name="head" + suffix,
    )
    outputs, _, _ = decoder(
        embed(tgt),
        memory,
        initial_state=[state],
        inputs_mask=tgt_mask,
        memory_mask=src_mask,
    )

    def encode(source):
        memory, state = encoder(source, training=False)
        mask = source != 0
        out = {"cell": [state], "memory": memory, "mask": mask}
        keys = decoder.memory_keys(memory, mask)
        if keys is not None:  # projected once, not at every step
            out["keys"] = keys
        return out

    def step_fn(tokens, state, index):
        out, cell, align = decoder.step(
            embed(tokens),
            state["cell"],
            state["memory"],
            state["mask"],
            keys=state.get("keys"),
        )
        logits = head(out[:, None], training=False)[:, 0]  # (B, V)
        return logits, {**state, "cell": cell}, align

    return head(outputs), encode, step_fn


def build_models(src_vocab, tgt_vocab, hp):
    """The training model (one output per member), `encode`, `step_fn`."""
    src = keras.Input((None,), dtype="int32", name="source")
    tgt = keras.Input((None,), dtype="int32", name="target_in")
    members = [
        build_member(src, tgt, src_vocab, tgt_vocab, hp, k)
        for k in range(hp["members"])
    ]
    logits = [m[0] for m in members]
    trainer = keras.Model(
        [src, tgt], logits if len(logits) > 1 else logits[0], name="translator"
    )
    if len(members) == 1:
        return trainer, *members[0][1:]
    return trainer, *seq2seq.ensemble([m[1:] for m in members])


"""
## Train

`seq2seq.SequenceLoss`: per-token cross-entropy with label smoothing,
zero at padding. Early stopping on validation loss, a halved learning rate
on plateaus, and `keras_attn.training.callbacks.TimeBudget`, which stops
training within one step of the time budget.
"""


def train(trainer, vec_en, vec_fr, train_pairs, val_pairs, hp, verbose):
    k = hp["members"]
    trainer.compile(
        optimizer=keras.optimizers.Adam(hp["learning_rate"], clipnorm=1.0),
        loss=seq2seq.SequenceLoss(label_smoothing=hp["label_smoothing"]),
        weighted_metrics=["accuracy"] if k == 1 else [["accuracy"]] * k,
    )
    start = time.time()
    history = trainer.fit(
        make_dataset(
            vec_en, vec_fr, train_pairs, hp["batch_size"], hp["seed"], k
        ),
        validation_data=make_dataset(vec_en, vec_fr, val_pairs, 512, None, k),
        epochs=hp["epochs"],
        verbose=verbose,
        callbacks=[
            keras.callbacks.EarlyStopping(
                patience=2, restore_best_weights=True
            ),
            keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=1),
            TimeBudget(hp["time_limit"]),
        ],
    ).history
    return history, time.time() - start


"""
## Translate and evaluate

`Translator` wraps `encode` and `step_fn` in a `tf.Module` whose
searches run in the graph, so they ship inside the SavedModel: strings in;
translation, tokens and alignment out. An `[UNK]` in the output becomes the
source word with the highest attention weight. Before that, with
`int8_weights`, Keras's weight-only int8 shrinks the `Embedding` and
`Dense` layers fourfold, so every figure below is the shipped model's.
The LiteRT file is exported just before, from the float weights, with
LiteRT's own dynamic-range int8: a Keras int8 layer becomes a
dequantization that LiteRT would run again in every search step (2.4
times slower: `benchmarks/litert_translator_export.py`).

Numbers are copied, not translated: `favour_copies` adds `copy_bonus`
to the `[UNK]` logit while the source holds an unknown word (1.5, chosen
on ten hand-written sentences with numbers, none from the data: it turns
"J'ai les chats et deux chiens." into "J'ai 3 chats et 12 chiens.").

`translation_scores` gives the headline, cased corpus BLEU
(sacrebleu, 13a) against every reference of each validation sentence, with
lowercased BLEU and exact matches.
"""


def favour_copies(encode, step_fn, unknown_id, bonus):
    """`encode` and `step_fn` that add `bonus` to the `[UNK]` logit at
    every step of a sentence whose source holds an unknown word. Those are
    numbers (words with a digit): the model learned to write `[UNK]` for
    them, which the translator replaces by the source word, but the
    training pairs hold few numbers and the decoder sometimes guesses a
    French number instead ("She bought 12 apples." → "trente pommes")."""
    if not bonus:
        return encode, step_fn

    def encode_flagged(source):
        return {"model": encode(source), "copy": ops.any(source == 1, axis=1)}

    def step_flagged(tokens, state, index):
        logits, inner, alignment = step_fn(tokens, state["model"], index)
        unknown = ops.arange(logits.shape[-1]) == unknown_id  # (V,)
        copy = ops.logical_and(state["copy"][:, None], unknown[None, :])
        logits = logits + bonus * ops.cast(copy, logits.dtype)
        return logits, {**state, "model": inner}, alignment

    return encode_flagged, step_flagged


def quantize_weights(trainer):
    """Keras's weight-only int8 for the `Embedding`, `Dense` and
    `EinsumDense` layers (activations stay float)."""
    int8 = keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)
    layers = (
        keras.layers.Embedding,
        keras.layers.Dense,
        keras.layers.EinsumDense,
    )
    trainer.quantize(config=int8, filters=lambda x: isinstance(x, layers))


def make_translator(trainer, encode, step_fn, vec_en, vec_fr, hp):
    """The `Translator` of the model, copying numbers
    (`favour_copies`), with the search and cutting settings of `hp`."""
    vocabulary = vec_fr.get_vocabulary()
    encode, step_fn = favour_copies(
        encode, step_fn, vocabulary.index("[UNK]"), hp["copy_bonus"]
    )
    return Translator(
        vec_en,
        vocabulary,
        encode,
        step_fn,
        hp["target_length"],
        trackable=trainer,
        standardize=split_sentence,
        detokenize=DETOKENIZERS[
            "french_wordpiece" if hp["subwords"] else "french"
        ],
        beam_width=hp["beam_width"],
        length_penalty=hp["length_penalty"],
        coverage_penalty=hp["coverage_penalty"],
        segmenter=hp["segmenter"],
        segment_longer_than=hp["segment_longer_than"],
    )


def evaluate(translator, pairs, greedy=False):
    """Scores on `pairs` and the (English, translation) list."""
    sentences, refs = references(pairs)
    hyps = translator.translate_texts(sentences, greedy)
    scores = translation_scores(hyps, refs)
    return scores, list(zip(sentences, hyps, strict=True))


"""
## Export

`Translator.save` writes the folder `keras-attn translate` reads: the
SavedModel with both searches, the vocabularies, and a LiteRT file holding
one search (`litert_search`: beam search by default) as one `translate`
signature (the loop is a builtin `WHILE`): one call per sentence, reading
the sentence's own length. `check_litert` compares it with the
SavedModel's same search on every validation sentence.
"""


def main(
    pairs=DEFAULT_PAIRS,
    limit=None,
    out=None,
    weights=None,
    verbose=2,
    build=None,
    name="translation_en_fr",
    describe=None,
    **overrides,
):
    """Train (or load `weights`), evaluate on validation, export to
    `out/name`. `build` defaults to `build_models`; `describe(hp)` adds
    entries to the metrics; `overrides` replace `HPARAMS` entries."""
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    if not os.path.isfile(pairs):
        raise FileNotFoundError(f"No file {pairs!r}: pass --pairs FILE")
    train_pairs, val_pairs = split_by_source(
        read_pairs(pairs, limit), hp["val_fraction"], hp["seed"]
    )
    # Subword vocabularies travel with the weights (read back with them).
    saved = weights + ".vocabularies.json" if weights else None
    fresh = saved and not os.path.isfile(weights)
    vec_en, vec_fr = make_vectorizers(train_pairs, hp, saved, fresh)
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
    translator = make_translator(trainer, encode, step_fn, vec_en, vec_fr, hp)
    scratch = tempfile.TemporaryDirectory()
    litert = os.path.join(scratch.name, "model.tflite")
    if out:  # from the float weights: LiteRT's own int8 is 2.4x faster
        translator.export_tflite(
            litert,
            quantize="dynamic" if hp["int8_weights"] else "none",
            search_method=hp["litert_search"],
        )
    if hp["int8_weights"]:  # Keras's weight-only int8, before evaluation
        quantize_weights(trainer)
    beam, examples = evaluate(translator, val_pairs)
    metrics = {
        "model": name,
        "data": os.path.basename(pairs),
        "split": {"pairs_train": len(train_pairs), "pairs_val": len(val_pairs)},
        "hyperparameters": hp,
        "parameters": trainer.count_params(),
        "history": {k: [round(v, 4) for v in vs] for k, vs in history.items()},
        "train_wall_time_s": wall and round(wall, 1),
        "val_beam": beam,
        "val_greedy": evaluate(translator, val_pairs, greedy=True)[0],
        "examples": examples[:10],
        "bleu": "sacrebleu corpus_bleu, 13a, all references; cased headline",
        "versions": versions(),
        **(describe(hp) if describe else {}),
    }
    print(f"{name}: val BLEU {beam['bleu_cased']:.2f} (cased, beam search)")
    if out:
        folder = translator.save(os.path.join(out, name), litert_file=litert)
        metrics["litert"] = translator.check_litert(
            os.path.join(folder, "model.tflite"),
            [s for s, _ in examples],
            greedy=hp["litert_search"] == "greedy",
        )
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    scratch.cleanup()
    return metrics, translator


def parse_args(description, hparams=HPARAMS):
    """Flags for the files, and a flag for each entry of `hparams`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--pairs", default=DEFAULT_PAIRS)
    parser.add_argument("--out", help="write the model folder under OUT")
    parser.add_argument("--weights", help="load (or save after training)")
    parser.add_argument("--limit", type=int, help="use the first N pairs")
    for key, value in hparams.items():  # --score A B C, --no-int8-weights
        flag, kind = "--" + key.replace("_", "-"), type(value)
        if kind is bool:
            kind = {"action": argparse.BooleanOptionalAction}
        else:
            kind = {"nargs": "+"} if kind is list else {"type": kind}
        parser.add_argument(flag, default=value, **kind)
    return parser


if __name__ == "__main__":
    main(**vars(parse_args(__doc__.split("\n")[1]).parse_args()))

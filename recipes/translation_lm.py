"""
Title: English→French translation with a decoder-only Transformer, for LiteRT-LM
Author: keras_attn contributors
Description: One causal stack reads `[start] English [sep]` and writes the
French after it. Learned from the shipped GRU ensemble's translations,
saved as a Keras model and as a `.litertlm` bundle that Google's
LiteRT-LM engine runs.

Run it: `python recipes/translation_lm.py --out saved_models` (about 30
minutes on two CPU cores, the teacher's translations included the first
time). Then `litert-lm run saved_models/translation_en_fr_lm/model.litertlm
--prompt "I am tired." --backend cpu`.
"""

"""
## Setup

The split is `translation.py`'s: the same validation sources, never seen
in training, with all their reference translations for BLEU.
"""

import json
import os
import time

import keras
import numpy as np
import translation
from translation_lm_teacher import teacher_translations

from keras_attn.models import CausalLM, TextGenerator
from keras_attn.training.callbacks import TimeBudget
from keras_attn.translation.data import read_pairs, references, split_by_source
from keras_attn.translation.evaluation import translation_scores
from keras_attn.translation.tokenizer_json import learn_wordpiece_tokenizer

START, SEP, END = "[start]", "[sep]", "[end]"
HPARAMS = {
    "vocabulary_size": 4000,  # one vocabulary for both languages
    "layers": 3,
    "heads": 4,
    "key_value_heads": 2,  # grouped-query attention: half the cache
    "hidden_dim": 256,
    "intermediate_dim": 768,
    "position": "rotary",
    "dropout": 0.1,
    "learning_rate": 1e-3,
    "weight_decay": 0.01,
    "batch_size": 64,
    "epochs": 60,
    "time_limit": 1500,  # seconds of training
    "max_length": 96,  # tokens of `[start] English [sep] French [end]`
    "context_length": 128,  # the bundle's cache
    "prefill_lengths": [8, 32],
    "distill": True,  # learn the teacher's translations
    "int8_weights": True,
    "val_fraction": 0.1,
    "seed": 1337,
}

"""
## Data: one sequence a pair

`[start] English [sep] French [end]`, tokenized by one WordPiece
vocabulary that `tokenizers` learns from both sides. The loss counts the
French and its end only: the English is the prompt. Batches group
sequences of similar length.
"""


def make_tokenizer(pairs, hp):
    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    return learn_wordpiece_tokenizer(
        texts, hp["vocabulary_size"], reserved=(START, SEP, END)
    )


def encode_pairs(tokenizer, pairs, max_length):
    """`(inputs, labels, weights)` lists of int32 arrays; longer
    sequences are left out."""
    ids = {t: tokenizer.token_to_id(t) for t in (START, SEP, END)}
    sources = tokenizer.encode_batch(
        [s for s, _ in pairs], add_special_tokens=False
    )
    targets = tokenizer.encode_batch(
        [t for _, t in pairs], add_special_tokens=False
    )
    rows = []
    for s, t in zip(sources, targets, strict=True):
        prompt = [ids[START], *s.ids, ids[SEP]]
        sequence = prompt + t.ids + [ids[END]]
        if len(sequence) > max_length:
            continue
        weights = [0] * (len(prompt) - 1) + [1] * (len(t.ids) + 1)
        rows.append((sequence[:-1], sequence[1:], weights))
    return rows


def make_dataset(rows, batch_size, seed):
    """Batches of rows of similar length, zero-padded, in random order."""
    import tensorflow as tf

    def padded(chunk):
        width = max(len(r[0]) for r in chunk)
        out = np.zeros((3, len(chunk), width), "int32")
        for i, (x, y, w) in enumerate(chunk):
            out[:, i, : len(x)] = (x, y, w)
        return out

    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    batches = [
        padded([rows[i] for i in order[k : k + batch_size]])
        for k in range(0, len(order), batch_size)
    ]
    rng = np.random.default_rng(seed)

    def generate():
        for b in rng.permutation(len(batches)):
            x, y, w = batches[b]
            yield x, y, w.astype("float32")

    spec = tf.TensorSpec((None, None), tf.int32)
    weight = tf.TensorSpec((None, None), tf.float32)
    return tf.data.Dataset.from_generator(
        generate, output_signature=(spec, spec, weight)
    ).prefetch(2)


"""
## The model

`keras_attn.models.CausalLM`: pre-norm blocks of causal
`MultiHeadPositional` self-attention (rotary positions, grouped key/value
heads) and a feed-forward network, logits tied to the embedding.
"""


def build_model(hp):
    return CausalLM(
        hp["vocabulary_size"],
        num_layers=hp["layers"],
        num_heads=hp["heads"],
        hidden_dim=hp["hidden_dim"],
        intermediate_dim=hp["intermediate_dim"],
        num_key_value_heads=hp["key_value_heads"],
        position=hp["position"],
        dropout=hp["dropout"],
    )


def train(model, train_rows, val_rows, hp, verbose):
    model.compile(
        optimizer=keras.optimizers.AdamW(
            hp["learning_rate"], weight_decay=hp["weight_decay"]
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
    )
    budget = TimeBudget(hp["time_limit"], anneal=True)
    history = model.fit(
        make_dataset(train_rows, hp["batch_size"], hp["seed"]),
        validation_data=make_dataset(val_rows, 256, 0),
        epochs=hp["epochs"],
        callbacks=[budget],
        verbose=verbose,
    )
    return {
        k: [round(float(v), 4) for v in vs] for k, vs in history.history.items()
    }


"""
## Translating: the engine's way, in Keras

`keras_attn.models.TextGenerator` holds the model, the tokenizer and the
prompt format: `[start]`, the English, ` [sep]`. It runs every prompt
token but the last through the cache at once, then decodes greedily from
the last, as LiteRT-LM does; prompts are left-padded into batches. The
same object saves the folder and writes the bundle, so the engine gets
the same prompt format.
"""


def make_generator(model, tokenizer, hp):
    return TextGenerator(
        model,
        tokenizer,
        start_token=START,
        stop_tokens=[END],
        context_length=hp["context_length"],
        prompt_suffix=f" {SEP}",
    )


def evaluate(generator, pairs):
    sentences, refs = references(pairs)
    hyps = generator.generate(sentences, batch_size=128)
    scores = translation_scores(hyps, refs)
    return scores, list(zip(sentences, hyps, strict=True))


"""
## The bundle in LiteRT-LM's engine

The engine (its Python API, in a child process: it loads its own LiteRT)
translates the validation sentences from the bundle with the bundle's
prompt template, greedy; its BLEU and how often its text equals the
Keras model's go into `metrics.json`.
"""

ENGINE = """
import json, sys
import litert_lm

litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
engine = litert_lm.Engine(
    sys.argv[1], backend=litert_lm.Backend.CPU(), cache_dir=sys.argv[4]
)
out = []
for sentence in json.load(open(sys.argv[2])):
    session = engine.create_session(apply_prompt_template=True)
    session.run_prefill([sentence])
    out.append("".join(r.texts[0] for r in session.run_decode_async()))
    session.close()
json.dump(out, open(sys.argv[3], "w"))
"""


def engine_translations(bundle, sentences):
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        given, got = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(given, "w") as f:
            json.dump(sentences, f)
        subprocess.run(
            [sys.executable, "-c", ENGINE, bundle, given, got, tmp],
            check=True,
        )
        with open(got) as f:
            return json.load(f)


def engine_scores(bundle, pairs, keras_samples):
    sentences, refs = references(pairs)
    started = time.monotonic()
    hyps = engine_translations(bundle, sentences)
    seconds = time.monotonic() - started
    same = sum(h == k for h, (_, k) in zip(hyps, keras_samples, strict=True))
    return {
        **translation_scores(hyps, refs),
        "equal_to_keras": round(same / len(hyps), 4),
        "seconds": round(seconds, 1),
    }


"""
## Train, evaluate, export

The bundle is written from the trained float weights, int8 by the
converter (dynamic range); the Keras model then keeps Keras's int8
(`quantize("int8")`), so that both fit the size budget.
`export_litertlm` writes the bundle: prefill and decode signatures over
per-layer key/value caches, the tokenizer, and a prompt
template that makes the engine's prompt `English [sep]`.
"""


def main(
    pairs=translation.DEFAULT_PAIRS,
    limit=None,
    out=None,
    weights=None,
    verbose=2,
    **overrides,
):
    hp = {**HPARAMS, **overrides}
    keras.utils.set_random_seed(hp["seed"])
    train_pairs, val_pairs = split_by_source(
        read_pairs(pairs, limit), hp["val_fraction"], hp["seed"]
    )
    if hp["distill"]:
        teacher = teacher_translations(sorted({s for s, _ in train_pairs}))
        train_pairs = sorted(teacher.items())
    # Reused weights need the ids they were trained on: the tokenizer is
    # kept beside them (`tokenizers` orders pieces of equal counts
    # differently from run to run).
    reuse = bool(weights) and os.path.exists(weights)
    if reuse:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(weights + ".tokenizer.json")
    else:
        tokenizer = make_tokenizer(train_pairs, hp)
    train_rows = encode_pairs(tokenizer, train_pairs, hp["max_length"])
    val_rows = encode_pairs(tokenizer, val_pairs, hp["max_length"])
    model = build_model(hp)
    model(np.ones((1, 4), "int32"))
    started = time.monotonic()
    if reuse:  # and how they were trained
        model.load_weights(weights)
        with open(weights + ".json") as f:
            history, trained = json.load(f)
    else:
        history = train(model, train_rows, val_rows, hp, verbose)
        trained = time.monotonic() - started
        if weights:
            model.save_weights(weights)
            tokenizer.save(weights + ".tokenizer.json")
            with open(weights + ".json", "w") as f:
                json.dump([history, trained], f)
    trained_weights = model.get_weights()
    folder = out and os.path.join(out, "translation_en_fr_lm")
    if folder:  # the bundle from the float weights, int8 by the converter
        os.makedirs(folder, exist_ok=True)
        make_generator(model, tokenizer, hp).export_litertlm(
            os.path.join(folder, "model.litertlm"),
            prefill_lengths=hp["prefill_lengths"],
            quantize="dynamic" if hp["int8_weights"] else "none",
            overwrite=True,
        )
    # The model to keep: the trained weights without the optimizer's.
    model = build_model(hp)
    model(np.ones((1, 4), "int32"))
    model.set_weights(trained_weights)
    if hp["int8_weights"]:
        # Keras's weight-only int8 (activations stay float): `CausalLM`
        # records the config, so the reloaded model is quantized alike.
        model.quantize(
            config=keras.quantizers.Int8QuantizationConfig(
                activation_quantizer=None
            )
        )
    generator = make_generator(model, tokenizer, hp)
    scores, samples = evaluate(generator, val_pairs)
    print(json.dumps(scores))
    metrics = {
        "model": "translation_en_fr_lm",
        "data": os.path.basename(pairs),
        "teacher": "translation_en_fr (beam search)" if hp["distill"] else None,
        "split": {"pairs_train": len(train_pairs), "pairs_val": len(val_pairs)},
        "hyperparameters": hp,
        "parameters": int(model.count_params()),
        "training_seconds": round(trained, 1),
        "history": history,
        "validation_greedy": scores,
        "samples": samples[:10],
    }
    if folder:
        bundle = os.path.join(folder, "model.litertlm")
        metrics["litertlm_validation_greedy"] = engine_scores(
            bundle, val_pairs, samples
        )
        print(json.dumps(metrics["litertlm_validation_greedy"]))
        generator.save(folder)
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics, generator


if __name__ == "__main__":
    parser = translation.parse_args(__doc__.split("\n")[1], HPARAMS)
    main(**vars(parser.parse_args()))

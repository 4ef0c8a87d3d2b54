"""English→French translation: a GRU seq2seq with keras_attn attention.

Encoder: Embedding → bidirectional GRU over the English tokens. Decoder
(Luong et al. 2015; CS224N notes): a GRU over the French prefix (teacher
forcing), then attention over the encoder states with the chosen score,
`s̃_t = tanh(W_c [a_t; s_t])`, `ŷ_t = softmax(W_y LayerNorm(s̃_t))` (the
normalization is ours: it speeds learning several times). Attention is
computed on top of the decoder GRU (no input feeding), so training runs
over whole sequences at once.

Data: a TSV of `English<TAB>French` pairs (`--pairs`, default
`$KERAS_ATTN_PAIRS` or `../shared/data/translation/pairs.tsv`), split into
train and validation **by English sentence**, so no validation sentence is
seen in training. BLEU: sacrebleu corpus BLEU (13a tokenization,
case-insensitive: the vocabulary is lowercased) against all the French
translations of each validation sentence.

    python examples/translation.py --score additive --out saved_models
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

DEFAULT_PAIRS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "shared",
    "data",
    "translation",
    "pairs.tsv",
)
START, END = "[start]", "[end]"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pairs", default=os.environ.get("KERAS_ATTN_PAIRS", DEFAULT_PAIRS)
    )
    p.add_argument(
        "--score",
        default="additive",
        choices=["additive", "dot", "general", "low_rank"],
    )
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--units", type=int, default=256)
    p.add_argument("--embed-dim", type=int, default=128)
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument(
        "--label-smoothing",
        type=float,
        default=0.1,
        help="mass spread over the target vocabulary in the loss",
    )
    p.add_argument(
        "--tie-embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="W_y = E_targetᵀ (with a projection to the embedding width)",
    )
    p.add_argument("--source-length", type=int, default=12)
    p.add_argument("--target-length", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=8000)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="use only the first N pairs (tests)",
    )
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument(
        "--eval-sentences",
        type=int,
        default=None,
        help="evaluate BLEU on this many validation sentences",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=30 * 60,
        help="training budget in seconds (no epoch starts that would end "
        "past it)",
    )
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument(
        "--out", default=None, help="write OUT/translation_en_fr[_<score>]/"
    )
    p.add_argument("--tag", default="")
    p.add_argument("--verbose", type=int, default=2)
    return p.parse_args(argv)


# -- data ---------------------------------------------------------------
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
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(english))
    n_val = max(1, int(len(english) * val_fraction))
    val_set = {english[i] for i in order[:n_val]}
    train = [p for p in pairs if p[0] not in val_set]
    val = [p for p in pairs if p[0] in val_set]
    return train, val


def references(pairs):
    """English sentence → all its French translations (order kept)."""
    refs = {}
    for en, fr in pairs:
        refs.setdefault(en, []).append(fr)
    return refs


# -- model --------------------------------------------------------------
def make_vectorizers(train, args):
    import keras
    import tensorflow as tf

    from keras_attn.text import standardize_sentence

    en = keras.layers.TextVectorization(
        max_tokens=args.max_tokens,
        standardize=standardize_sentence,
        output_sequence_length=args.source_length,
        name="source_vectorizer",
    )
    en.adapt(tf.constant([p[0] for p in train]), batch_size=2048)
    fr = keras.layers.TextVectorization(
        max_tokens=args.max_tokens,
        standardize=None,
        output_sequence_length=args.target_length + 1,
        name="target_vectorizer",
    )
    fr.adapt(target_text([p[1] for p in train]), batch_size=2048)
    return en, fr


def target_text(french):
    import tensorflow as tf

    from keras_attn.text import standardize_sentence

    std = standardize_sentence(tf.constant(french))
    return tf.strings.join([START, std, END], separator=" ")


def build_models(src_vocab, tgt_vocab, args):
    """Training model, encoder model and one-step decoder model."""
    import keras

    from keras_attn import Attention

    TiedOutput = tied_output_class()
    u, e = args.units, args.embed_dim
    # Encoder.
    # Lengths are left open: training batches are trimmed to their longest
    # sentence; the exported signatures fix them.
    src = keras.Input((None,), dtype="int64", name="source")
    x = keras.layers.Embedding(src_vocab, e, mask_zero=True)(src)
    x = keras.layers.Dropout(args.dropout)(x)
    memory, fwd, bwd = keras.layers.Bidirectional(
        keras.layers.GRU(u // 2, return_sequences=True, return_state=True),
        name="encoder_gru",
    )(x)
    state0 = keras.layers.Dense(u, activation="tanh", name="bridge")(
        keras.layers.Concatenate()([fwd, bwd])
    )
    encoder = keras.Model(src, [memory, state0], name="encoder")

    # Decoder layers, shared by the training and the one-step models.
    tgt_embed = keras.layers.Embedding(tgt_vocab, e, mask_zero=True)
    dec_gru = keras.layers.GRU(
        u, return_sequences=True, return_state=True, name="decoder_gru"
    )
    attention = Attention(
        score=args.score, units=u, rank=args.rank, name="attention"
    )
    combine = keras.layers.Dense(u, activation="tanh", name="W_c")
    # Layer normalization of s̃ before W_y: without it the model learned
    # several times slower (validation loss 4.35 vs 2.03 after two epochs
    # on 20k pairs, same settings otherwise).
    norm = keras.layers.LayerNormalization(name="norm")
    if args.tie_embeddings:
        # W_y = Eᵀ P (Press & Wolf 2017): half the decoder's weights.
        # Two layers, not a Sequential: a Sequential would drop the target
        # mask, and the loss would then be averaged over padding too.
        p_layer = keras.layers.Dense(e, use_bias=False, name="P")
        tied = TiedOutput(tgt_embed, name="W_y")

        def project(x):
            return tied(p_layer(x))

    else:
        project = keras.layers.Dense(tgt_vocab, name="W_y")
    drop = keras.layers.Dropout(args.dropout)

    def decode(y_ids, state, memory, memory_mask=None):
        y = tgt_embed(y_ids)
        s, new_state = dec_gru(y, initial_state=state)
        a, w = attention(
            s, memory, value_mask=memory_mask, return_attention_scores=True
        )
        s_tilde = combine(keras.layers.Concatenate()([a, s]))
        return project(drop(norm(s_tilde))), new_state, w

    tgt_in = keras.Input((None,), dtype="int64", name="target_in")
    mem, st = encoder(src)
    logits, _, _ = decode(tgt_in, st, mem, keras.ops.not_equal(src, 0))
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


def tied_output_class():
    import keras
    from keras import ops

    class TiedOutput(keras.layers.Layer):
        """Logits `x Eᵀ + b` from an `Embedding`'s matrix `E (V, e)`."""

        def __init__(self, embedding, **kwargs):
            super().__init__(**kwargs)
            self.embedding = embedding
            self.supports_masking = True

        def build(self, input_shape):
            self.bias = self.add_weight(
                shape=(self.embedding.input_dim,),
                initializer="zeros",
                name="bias",
            )

        def call(self, x):
            # (B, T, e) @ (e, V) -> (B, T, V)
            kernel = ops.transpose(self.embedding.embeddings)
            return ops.matmul(x, ops.cast(kernel, x.dtype)) + self.bias

    return TiedOutput


def smoothed_loss(vocab_size, epsilon):
    """Per-token cross-entropy with label smoothing; 0 at padding."""
    import keras
    from keras import ops

    def loss(y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        onehot = ops.one_hot(y_true, vocab_size)
        per_token = keras.losses.categorical_crossentropy(
            onehot, y_pred, from_logits=True, label_smoothing=epsilon
        )  # (B, T)
        return per_token * ops.cast(ops.not_equal(y_true, 0), "float32")

    return loss


def make_dataset(vec_en, vec_fr, pairs, batch_size, shuffle_seed=None):
    """Batches of similar target length, trimmed to their longest sentence.

    Tatoeba sentences are short (7 French tokens on average, at most 18),
    so padding every batch to `--target-length` would spend most of the
    output softmax on padding.
    """
    import tensorflow as tf

    src = vec_en(tf.constant([p[0] for p in pairs]))
    tgt = vec_fr(target_text([p[1] for p in pairs]))
    ds = tf.data.Dataset.from_tensor_slices((src, tgt))
    if shuffle_seed is not None:
        ds = ds.shuffle(len(pairs), seed=shuffle_seed)

    def length(s, t):
        return tf.cast(tf.math.count_nonzero(t), tf.int32)

    ds = ds.bucket_by_sequence_length(
        length,
        bucket_boundaries=[5, 7, 9, 12],
        bucket_batch_sizes=[batch_size] * 5,
    )

    def trim(s, t):
        s_len = tf.reduce_max(tf.math.count_nonzero(s, axis=1))
        t_len = tf.reduce_max(tf.math.count_nonzero(t, axis=1))
        s, t = s[:, :s_len], t[:, :t_len]
        return (s, t[:, :-1]), t[:, 1:]

    return ds.map(trim).prefetch(tf.data.AUTOTUNE)


# -- the exported translator -------------------------------------------
def make_translator(vec_en, vec_fr, encoder, step, args):
    """A `tf.Module` with `translate` (beam) and `translate_greedy`."""
    import tensorflow as tf

    from keras_attn import decoding

    vocab = vec_fr.get_vocabulary()
    start_id, end_id = vocab.index(START), vocab.index(END)
    # Never emit the unknown-word token: the next best word is closer.
    banned = tuple(i for i, t in enumerate(vocab) if t == "[UNK]")
    src_vocab = vec_en.get_vocabulary()

    class Translator(tf.Module):
        def __init__(self):
            super().__init__()
            self.vec_en, self.encoder, self.step = vec_en, encoder, step
            self.vocab = tf.constant(vocab)
            self.src_vocab = tf.constant(src_vocab)

        def _encode(self, source):
            memory, state = self.encoder(source, training=False)
            return memory, state

        def _step(self, prev, state, memory, mask):
            return self.step([prev, state, memory, mask], training=False)

        def _finish(self, text, ids, attention):
            source = self.vec_en(text)
            keep = (
                tf.cumsum(
                    tf.cast(tf.equal(ids, end_id), "int32"),
                    axis=1,
                    exclusive=True,
                )
                == 0
            )
            keep &= (ids != end_id) & (ids != 0)
            words = tf.where(keep, tf.gather(self.vocab, ids), "")
            joined = tf.strings.reduce_join(words, axis=1, separator=" ")
            joined = tf.strings.regex_replace(joined, " +", " ")
            joined = tf.strings.regex_replace(joined, "' ", "'")
            joined = tf.strings.regex_replace(joined, r" ([.,])", r"\1")
            joined = tf.strings.strip(joined)
            return {
                "translation": joined,
                "target_tokens": tf.where(keep, tf.gather(self.vocab, ids), ""),
                "source_tokens": tf.gather(self.src_vocab, source),
                "attention": attention,
            }

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def translate(self, text):
            ids, att = decoding.beam_search(
                self._encode,
                self._step,
                self.vec_en(text),
                start_id,
                end_id,
                args.target_length,
                args.beam_width,
                args.length_penalty,
                banned_ids=banned,
            )
            return self._finish(text, ids, att)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def translate_greedy(self, text):
            ids, att = decoding.greedy_decode(
                self._encode,
                self._step,
                self.vec_en(text),
                start_id,
                end_id,
                args.target_length,
                banned_ids=banned,
            )
            return self._finish(text, ids, att)

    return Translator()


def evaluate(translate_fn, refs, sentences, batch=256):
    """Corpus BLEU (sacrebleu, lowercased) and exact-match rate."""
    import sacrebleu
    import tensorflow as tf

    from keras_attn.text import standardize_sentence

    hyps = []
    for i in range(0, len(sentences), batch):
        out = translate_fn(tf.constant(sentences[i : i + batch]))
        hyps.extend(t.decode("utf-8") for t in out["translation"].numpy())
    ref_lists = [refs[s] for s in sentences]
    width = max(len(r) for r in ref_lists)
    streams = [
        [r[j] if j < len(r) else None for r in ref_lists] for j in range(width)
    ]
    bleu = sacrebleu.corpus_bleu(hyps, streams, lowercase=True)

    def norm(texts):
        return [
            t.decode() for t in standardize_sentence(tf.constant(texts)).numpy()
        ]

    hyp_norm = norm(hyps)
    exact = np.mean(
        [h in set(norm(r)) for h, r in zip(hyp_norm, ref_lists, strict=True)]
    )
    return float(bleu.score), float(exact), hyps


def export_seq2seq_tflite(encoder, step, path, source_length, units):
    """LiteRT model with two signatures: `encode` and one decoder `step`.

    `encode(source (1, S) int32) -> memory (1, S, U), state (1, U)`;
    `step(prev (1, 1) int32, state (1, U), memory (1, S, U), memory_mask
    (1, S) bool) -> logits (1, V), new_state (1, U), attention (1, S)`:
    the contract `keras_attn.litert_runtime.LiteRTTranslator` drives.
    """
    import tensorflow as tf

    from keras_attn.export import export_signatures_tflite

    @tf.function(
        input_signature=[tf.TensorSpec([1, source_length], tf.int32, "source")]
    )
    def encode(source):
        memory, state = encoder(source, training=False)
        return {"memory": memory, "state": state}

    @tf.function(
        input_signature=[
            tf.TensorSpec([1, 1], tf.int32, name="prev"),
            tf.TensorSpec([1, units], tf.float32, name="state"),
            tf.TensorSpec([1, source_length, units], tf.float32, "memory"),
            tf.TensorSpec([1, source_length], tf.bool, name="memory_mask"),
        ]
    )
    def one_step(prev, state, memory, memory_mask):
        logits, new_state, att = step(
            [prev, state, memory, memory_mask], training=False
        )
        return {"logits": logits, "state": new_state, "attention": att}

    return export_signatures_tflite(
        {"encode": encode, "step": one_step}, path, overwrite=True
    )


def export_litert(folder, encoder, step, translator, sentences, args):
    """Write `model.tflite`; compare its greedy output with Keras'."""
    import tensorflow as tf

    from keras_attn.export import tflite_op_names
    from keras_attn.litert_runtime import LiteRTTranslator

    path = os.path.join(folder, "model.tflite")
    export_seq2seq_tflite(encoder, step, path, args.source_length, args.units)
    lite = LiteRTTranslator(path, max_length=args.target_length)
    keras_out = []
    for i in range(0, len(sentences), 256):
        out = translator.translate_greedy(tf.constant(sentences[i : i + 256]))
        keras_out.extend(t.decode() for t in out["translation"].numpy())
    same = [
        lite.translate(s) == k
        for s, k in zip(sentences, keras_out, strict=True)
    ]
    return {
        "size_bytes": os.path.getsize(path),
        "ops": tflite_op_names(path),
        "greedy_agreement_with_keras": float(np.mean(same)),
        "sentences": len(sentences),
    }


def time_limit_callback():
    import keras

    class TimeLimit(keras.callbacks.Callback):
        """Stop when one more epoch would end past `limit` seconds."""

        def __init__(self, start, limit):
            super().__init__()
            self.start, self.limit = start, limit
            self.epoch_start = start

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_start = time.time()

        def on_epoch_end(self, epoch, logs=None):
            now = time.time()
            if now + (now - self.epoch_start) > self.start + self.limit:
                self.model.stop_training = True

    return TimeLimit


def main(argv=None):
    import keras
    import tensorflow as tf

    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    pairs = load_pairs(args.pairs, args.limit)
    train, val = split_by_english(pairs, args.val_fraction, args.seed)
    start = time.time()
    TimeLimit = time_limit_callback()
    vec_en, vec_fr = make_vectorizers(train, args)
    trainer, encoder, step = build_models(
        vec_en.vocabulary_size(), vec_fr.vocabulary_size(), args
    )
    trainer.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
        loss=smoothed_loss(vec_fr.vocabulary_size(), args.label_smoothing),
        weighted_metrics=["accuracy"],
    )
    train_ds = make_dataset(vec_en, vec_fr, train, args.batch_size, args.seed)
    val_ds = make_dataset(vec_en, vec_fr, val, 512)
    history = trainer.fit(
        train_ds,
        validation_data=val_ds,
        epochs=args.epochs,
        verbose=args.verbose,
        callbacks=[
            keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=2, restore_best_weights=True
            ),
            keras.callbacks.ReduceLROnPlateau(
                monitor="val_loss", factor=0.5, patience=1
            ),
            TimeLimit(start, args.time_limit),
        ],
    )
    wall = time.time() - start
    translator = make_translator(vec_en, vec_fr, encoder, step, args)
    refs = references(val)
    sentences = sorted(refs)[: args.eval_sentences]
    bleu, exact, hyps = evaluate(translator.translate, refs, sentences)
    g_bleu, g_exact, _ = evaluate(translator.translate_greedy, refs, sentences)
    metrics = {
        "score": args.score,
        "data": os.path.basename(args.pairs),
        "split": {
            "pairs_train": len(train),
            "pairs_val": len(val),
            "english_train": len({p[0] for p in train}),
            "english_val": len(refs),
            "by": "English sentence",
            "seed": args.seed,
        },
        "hyperparameters": {
            k: v
            for k, v in vars(args).items()
            if k not in ("pairs", "out", "verbose", "tag")
        },
        "epochs_run": len(history.history["loss"]),
        "history": {
            k: [round(float(v), 4) for v in vs]
            for k, vs in history.history.items()
        },
        "train_wall_time_s": round(wall, 1),
        "val_sentences_evaluated": len(sentences),
        "val_bleu_beam": bleu,
        "val_exact_match_beam": exact,
        "val_bleu_greedy": g_bleu,
        "val_exact_match_greedy": g_exact,
        "bleu": "sacrebleu corpus_bleu, 13a, lowercase=True, all refs",
        "examples": [
            [s, h] for s, h in zip(sentences[:8], hyps[:8], strict=False)
        ],
        "versions": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
            "machine": f"{os.cpu_count()} CPU cores",
        },
    }
    print(
        json.dumps(
            {
                k: metrics[k]
                for k in (
                    "score",
                    "epochs_run",
                    "train_wall_time_s",
                    "val_bleu_beam",
                    "val_exact_match_beam",
                    "val_bleu_greedy",
                )
            }
        ),
        flush=True,
    )
    if args.out:
        from keras_attn.export import atomic_path

        folder = os.path.join(args.out, f"translation_en_fr{args.tag}")
        os.makedirs(folder, exist_ok=True)
        with atomic_path(os.path.join(folder, "saved_model")) as tmp:
            tf.saved_model.save(
                translator,
                tmp,
                signatures={
                    "serving_default": translator.translate,
                    "translate": translator.translate,
                    "translate_greedy": translator.translate_greedy,
                },
            )
        for name, vec in (("source", vec_en), ("target", vec_fr)):
            with open(
                os.path.join(folder, f"{name}_vocabulary.txt"),
                "w",
                encoding="utf-8",
            ) as f:
                f.write("\n".join(vec.get_vocabulary()) + "\n")
        metrics["litert"] = export_litert(
            folder, encoder, step, translator, sentences, args
        )
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, ensure_ascii=False)
    return metrics, translator, (encoder, step, vec_en, vec_fr)


if __name__ == "__main__":
    main(sys.argv[1:])

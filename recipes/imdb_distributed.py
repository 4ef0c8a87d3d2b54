"""
Title: Training the attention models on several devices or machines
Author: keras_attn contributors
Description: The IMDB models of `imdb_classification.py` and `imdb_mhp.py`
trained with `tf.distribute` (one machine or several) or with
`keras.distribution` (data or model parallel on JAX), with the same
per-step losses as one device.

Run it (two machines, or two terminals on one):

    TF_CONFIG=$(python -c "from keras_attn.training.distribute import \
tf_config; print(tf_config(['host1:12345', 'host2:12345'], 0))") \
    python recipes/imdb_distributed.py --strategy multi-worker

and the same with index 1 on the second machine. More in
docs/distributed.md.
"""

"""
## Introduction

Keras 3's `model.fit` fails under TensorFlow's
`MultiWorkerMirroredStrategy` (keras-team/keras#20585), so on TensorFlow
we train with `keras_attn.training.distribute.fit`, a custom step run by
`strategy.run` that keeps Keras's loss scaling: each replica's loss, the
`StructuredSelfAttention` penalty included, is divided by the number of
replicas and the gradients are summed. On JAX, `model.fit` works as it is
under `keras.distribution`; `keras_attn.training.distribute.layout_map` tells
`ModelParallel` how to split `MultiHeadPositional`'s heads.

| `--strategy` | backend | what is split |
| --- | --- | --- |
| `one-device` | TensorFlow or JAX | nothing (the reference) |
| `mirrored` | TensorFlow | the batch, over two local devices |
| `multi-worker` | TensorFlow | the batch, over the workers in `TF_CONFIG` |
| `data-parallel` | JAX | the batch, over the local devices |
| `model-parallel` | JAX | attention heads, over the local devices |

On a CPU, `XLA_FLAGS=--xla_force_host_platform_device_count=2` gives JAX
two devices to split over. JAX also runs one process per machine:
`--processes 2 --process-id I --coordinator HOST:PORT` (the same
coordinator, process 0's address, everywhere) joins them through
`keras_attn.training.distribute.initialize_jax`, and `data-parallel` or
`model-parallel` then splits over every process's devices.
"""

import argparse
import json
import os
import sys

import numpy as np

STRATEGIES = {
    "one-device": None,  # TensorFlow or JAX: the reference
    "mirrored": "tensorflow",
    "multi-worker": "tensorflow",
    "data-parallel": "jax",
    "model-parallel": "jax",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--strategy", choices=STRATEGIES, default="one-device")
    parser.add_argument("--model", choices=["ssa", "mhp"], default="ssa")
    parser.add_argument("--limit", type=int, help="use only this many reviews")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="global")
    parser.add_argument("--length", type=int, help="tokens kept per review")
    parser.add_argument(
        "--no-dropout",
        action="store_true",
        help="no dropout, so that losses can be compared with one device",
    )
    parser.add_argument("--losses", help="write the per-step losses (JSON)")
    parser.add_argument(
        "--processes", type=int, default=1, help="JAX: processes in the job"
    )
    parser.add_argument("--process-id", type=int, default=0, help="JAX")
    parser.add_argument(
        "--coordinator", help="JAX: host:port of process 0 (with --processes)"
    )
    args = parser.parse_args(argv)
    if args.processes > 1 and (
        STRATEGIES[args.strategy] != "jax" or not args.coordinator
    ):
        parser.error(
            "--processes > 1 needs --strategy data-parallel or model-parallel "
            f"and --coordinator; received --strategy {args.strategy} and "
            f"--coordinator {args.coordinator}"
        )
    return args


"""
## Choose the backend before Keras is imported

The strategy decides the backend. TensorFlow's multi-worker strategy must
also be created before any other TensorFlow op, so it comes first.
"""


def start(strategy_name, processes=1, process_id=0, coordinator=None):
    backend = STRATEGIES[strategy_name] or os.environ.get(
        "KERAS_BACKEND", "tensorflow"
    )
    if os.environ.setdefault("KERAS_BACKEND", backend) != backend:
        raise SystemExit(
            f"--strategy {strategy_name} needs KERAS_BACKEND={backend}; "
            f"received KERAS_BACKEND={os.environ['KERAS_BACKEND']}"
        )
    if strategy_name == "multi-worker":
        from keras_attn.training.distribute import multi_worker_strategy

        return multi_worker_strategy()
    if strategy_name == "mirrored":
        import tensorflow as tf

        cpus = tf.config.list_physical_devices("CPU")
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < 2:  # two logical devices on the CPU
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
            )
            return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        return tf.distribute.MirroredStrategy()
    if strategy_name == "one-device" and backend == "tensorflow":
        import tensorflow as tf

        return tf.distribute.get_strategy()
    if processes > 1:  # one JAX job over several processes
        from keras_attn.training.distribute import initialize_jax

        initialize_jax(coordinator, processes, process_id)
    return None  # JAX


"""
## Data, sharded by example

Each worker reads the whole (small) dataset and keeps every n-th review,
so that the workers' halves of a step make up the one-device batch. The
vocabulary is learned on the training split, identically everywhere.
"""


def dataset_fn(tokens, labels, global_batch, seed):
    import tensorflow as tf

    def make(context=None):
        context = context or tf.distribute.InputContext()
        mine = slice(
            context.input_pipeline_id, None, context.num_input_pipelines
        )
        ds = tf.data.Dataset.from_tensor_slices((tokens, labels))
        ds = ds.shuffle(len(tokens), seed=seed)
        ds = ds.batch(global_batch, drop_remainder=True)  # even splits
        ds = ds.map(lambda x, y: (x[mine], y[mine]))  # this worker's rows
        # ... split between the worker's own replicas.
        ds = ds.rebatch(context.get_per_replica_batch_size(global_batch))
        return ds.prefetch(-1)

    return make


"""
## Build, compile and train inside the strategy

Variables made under `strategy.scope()` are mirrored on every replica.
"""


def build(model_name, vocab_size, hp):
    import imdb_classification
    import imdb_mhp
    import keras

    keras.utils.set_random_seed(hp["seed"])
    builder = imdb_mhp if model_name == "mhp" else imdb_classification
    model = builder.build_model(vocab_size, hp)
    trainer = keras.Model(model.input, model.output["probability"])
    trainer.compile(
        optimizer=keras.optimizers.Adam(hp["learning_rate"], clipnorm=1.0),
        loss="binary_crossentropy",
    )
    return trainer


def train_tf(strategy, args, hp, train, vocab_size):
    from keras_attn.training import distribute

    with strategy.scope():
        model = build(args.model, vocab_size, hp)
    make = dataset_fn(*train, args.batch_size, hp["seed"])
    return distribute.fit(model, make, epochs=args.epochs, strategy=strategy)


def train_jax(args, hp, train, vocab_size):
    import jax
    import keras

    from keras_attn.training import distribute

    devices = keras.distribution.list_devices()
    if args.strategy == "one-device":
        devices = devices[:1]
    elif args.strategy == "data-parallel":
        dist = keras.distribution.DataParallel(devices=devices)
    else:
        mesh = keras.distribution.DeviceMesh(
            (1, len(devices)), ("batch", "model"), devices
        )
        dist = keras.distribution.ModelParallel(
            layout_map=distribute.layout_map(mesh), batch_dim_name="batch"
        )
    if args.strategy != "one-device":
        keras.distribution.set_distribution(dist)
    model = build(args.model, vocab_size, hp)

    class RunningLoss(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_train_batch_end(self, batch, logs=None):
            self.seen.append(float(logs["loss"]))

    make = dataset_fn(*train, args.batch_size, hp["seed"])
    running = RunningLoss()
    history = model.fit(
        make(), epochs=args.epochs, verbose=2, callbacks=[running]
    ).history
    # Where each device holds part of a weight, say which part.
    shards = {
        v.path: [list(s.data.shape) for s in v.value.addressable_shards]
        for v in model.weights
        if v.path.endswith("query/kernel")
    }
    # `fit` logs the epoch's running mean after each step.
    return {
        **history,
        "running_loss": running.seen,
        "devices": len(devices),
        "processes": jax.process_count(),
        "shards": shards,
    }


def main(argv=None):
    args = parse_args(argv)
    strategy = start(
        args.strategy, args.processes, args.process_id, args.coordinator
    )
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import imdb_classification
    import imdb_mhp

    base = imdb_mhp if args.model == "mhp" else imdb_classification
    hp = dict(base.HPARAMS)
    if args.length:
        hp["length"] = args.length
    if args.no_dropout:
        hp.update(dropout=0.0, word_dropout=0.0)
    data = imdb_classification.load_imdb(
        args.limit, hp["val_fraction"], hp["seed"]
    )
    vectorizer = imdb_classification.make_vectorizer(data["train"][0], hp)
    # Token ids once, up front (the vectorizer is a TensorFlow op).
    texts, labels = data["train"]
    train = (np.asarray(vectorizer(texts)), labels)
    size = vectorizer.vocabulary_size()
    if strategy is not None:
        history = train_tf(strategy, args, hp, train, size)
    else:
        history = train_jax(args, hp, train, size)
    if args.losses:
        with open(args.losses, "w") as f:
            json.dump(history, f)
    return history


if __name__ == "__main__":
    main()

"""Training on several devices or machines.

Two paths, one per backend family:

- **TensorFlow** (`tf.distribute`): Keras 3's `model.fit` fails under
  `tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras#20585:
  "Attempt to convert a value (PerReplica...)"). `fit` below is the
  training half of `model.fit` written as a custom step with
  `strategy.run`; it works under that strategy, `MirroredStrategy` and no
  strategy at all, and keeps Keras's loss scaling (compiled losses and
  `add_loss` penalties are divided by the number of replicas, gradients
  summed), so per-step losses equal one device's.
- **JAX** (`keras.distribution`): `model.fit` works as it is under
  `keras.distribution.DataParallel`; `layout_map` shards the projections
  of `MultiHeadPositional` (and of Keras's `MultiHeadAttention`, which has
  the same weight names) for `keras.distribution.ModelParallel`;
  `initialize_jax` joins several processes (machines) into one job, CPU
  processes included.

`recipes/imdb_distributed.py` runs every path; docs/distributed.md shows
how to start the workers.
"""

import json
import math
import time

import keras

__all__ = [
    "fit",
    "initialize_jax",
    "layout_map",
    "multi_worker_strategy",
    "tf_config",
]


def tf_config(workers, index):
    """The `TF_CONFIG` JSON for worker `index` of `workers` ("host:port")."""
    workers = list(workers)
    if not workers or not all(isinstance(w, str) and ":" in w for w in workers):
        raise ValueError(
            f"`workers` must be a non-empty list of 'host:port' strings; "
            f"received workers={workers!r}"
        )
    if not isinstance(index, int) or not 0 <= index < len(workers):
        raise ValueError(
            f"`index` must be an integer in [0, {len(workers)}); received "
            f"index={index!r}"
        )
    return json.dumps(
        {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
    )


def initialize_jax(coordinator, num_processes, process_id):
    """Join a multi-process JAX job (one process per machine or device).

    Call it first thing in every process, before any other JAX op (JAX's
    rule), with the same `coordinator` and `num_processes` and each
    process's own `process_id`. It is `keras.distribution.initialize`,
    with Gloo collectives switched on so that processes on CPUs can talk
    (JAX has none for CPUs by default). Afterwards
    `keras.distribution.list_devices()` lists every process's devices, and
    `keras.distribution.DataParallel` splits each global batch between the
    processes (`model.fit` shards a `tf.data.Dataset` of global batches).

    Args:
        coordinator: "host:port" where process 0 listens.
        num_processes: the number of processes in the job.
        process_id: this process's index in `[0, num_processes)`; process 0
            is the coordinator.
    """
    if keras.backend.backend() != "jax":
        raise ValueError(
            "initialize_jax needs the JAX backend (KERAS_BACKEND=jax); "
            f"received backend {keras.backend.backend()!r}"
        )
    if not isinstance(coordinator, str) or ":" not in coordinator:
        raise ValueError(
            "`coordinator` must be a 'host:port' string; received "
            f"coordinator={coordinator!r}"
        )
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(
            "`num_processes` must be a positive integer; received "
            f"num_processes={num_processes!r}"
        )
    if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise ValueError(
            f"`process_id` must be an integer in [0, {num_processes}); "
            f"received process_id={process_id!r}"
        )
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    keras.distribution.initialize(coordinator, num_processes, process_id)


def multi_worker_strategy():
    """A `MultiWorkerMirroredStrategy` from the `TF_CONFIG` variable.

    Call it first thing in the program, before any other TensorFlow op
    (TensorFlow's rule). Every worker runs the same program with its own
    `TF_CONFIG` (see `tf_config`); training starts when all have joined.
    """
    import os

    import tensorflow as tf

    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ValueError(
            "The multi-worker strategy needs the TF_CONFIG environment "
            "variable (cluster and task of this worker); it is not set. "
            "Build it with "
            "keras_attn.training.distribute.tf_config(workers, index)."
        )
    try:
        config = json.loads(raw)
        config["cluster"]["worker"], config["task"]["index"]  # both there
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"TF_CONFIG must be JSON with cluster.worker and task.index; "
            f"received TF_CONFIG={raw!r} ({error})"
        ) from None
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )


def fit(model, data, epochs=1, strategy=None, verbose=1):
    """Train a compiled Keras model under a `tf.distribute` strategy.

    Args:
        model: a Keras model built and compiled inside `strategy.scope()`
            (TensorFlow backend).
        data: a `tf.data.Dataset` of `(x, y)` or `(x, y, sample_weight)`
            batched with the global batch size, or a function
            `data(input_context) -> tf.data.Dataset` batched with
            `input_context.get_per_replica_batch_size(global_batch)`
            (`strategy.distribute_datasets_from_function`; each worker
            then reads its own shard).
        epochs: passes over `data`.
        strategy: a `tf.distribute.Strategy`; defaults to the current one.
        verbose: 0 silent, 1 one line per epoch (on the chief only).

    Returns:
        `{"loss": [mean per epoch], "step_loss": [loss per step]}`, the
        losses being global-batch means, penalties from `add_loss` included,
        as `model.fit` reports them on one device.

    Batches should divide evenly between replicas: Keras scales each
    replica's loss by `1 / num_replicas`, so an uneven last batch weighs
    its replicas' examples unequally (as in `model.fit`).
    """
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    dist_data = _distributed_data(model, data, epochs, strategy)
    variables = model.trainable_variables
    with strategy.scope():
        model.optimizer.build(variables)

    def replica_step(batch):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            # Scaled by 1 / num_replicas (Keras's TF trainer), penalties too.
            loss = model.compute_loss(
                x, y, y_pred, sample_weight, training=True
            )
        gradients = tape.gradient(loss, variables)
        model.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        return loss

    @tf.function
    def step(batch):
        per_replica = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(
            tf.distribute.ReduceOp.SUM, per_replica, axis=None
        )

    chief = _is_chief(strategy)
    history = {"loss": [], "step_loss": []}
    for epoch in range(epochs):
        start, losses = time.time(), []
        for batch in dist_data:
            losses.append(float(step(batch)))
        if not losses:
            raise ValueError("`data` gave no batch.")
        history["step_loss"] += losses
        history["loss"].append(math.fsum(losses) / len(losses))
        if verbose and chief:
            print(
                f"epoch {epoch + 1}/{epochs}: loss {history['loss'][-1]:.4f}"
                f" ({len(losses)} steps, {time.time() - start:.1f} s, "
                f"{strategy.num_replicas_in_sync} replicas)"
            )
    return history


def _distributed_data(model, data, epochs, strategy):
    """`fit`'s checks (a TensorFlow-backed compiled model, `epochs`, the
    kind of `data`); `data` distributed by `strategy`."""
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "keras_attn.training.distribute.fit runs tf.distribute "
            "strategies and "
            "needs the TensorFlow backend; received backend="
            f"{keras.backend.backend()!r}. On JAX use "
            "keras.distribution.DataParallel with model.fit."
        )
    if getattr(model, "optimizer", None) is None:
        raise ValueError("`model` must be compiled (with an optimizer) first.")
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(
            f"`epochs` must be a positive integer; received {epochs!r}"
        )
    if callable(data) and not isinstance(data, tf.data.Dataset):
        return strategy.distribute_datasets_from_function(data)
    if isinstance(data, tf.data.Dataset):
        return strategy.experimental_distribute_dataset(data)
    raise ValueError(
        "`data` must be a tf.data.Dataset or a function of a "
        f"tf.distribute.InputContext; received {type(data).__name__}"
    )


def _is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or not resolver.task_type or resolver.task_id == 0


def layout_map(
    device_mesh,
    model_parallel_dim_name="model",
    data_parallel_dim_name="batch",
):
    """A `keras.distribution.LayoutMap` for model parallelism.

    Shards the heads of the query, key and value projections and of the
    output projection of every `MultiHeadPositional` (and Keras
    `MultiHeadAttention`) over the mesh axis `model_parallel_dim_name`,
    Megatron style: each device holds whole heads, so attention needs no
    communication until the output projection sums over heads. The
    feed-forward `g`, when there is one, is sharded on its hidden units.
    Other weights are replicated.

        mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"))
        keras.distribution.set_distribution(
            keras.distribution.ModelParallel(
                layout_map=keras_attn.training.distribute.layout_map(mesh),
                batch_dim_name="batch",
            )
        )
    """
    axes = tuple(device_mesh.axis_names)
    for name, arg in (
        (model_parallel_dim_name, "model_parallel_dim_name"),
        (data_parallel_dim_name, "data_parallel_dim_name"),
    ):
        if name not in axes:
            raise ValueError(
                f"`{arg}` must name an axis of the device mesh {axes}; "
                f"received {name!r}"
            )
    model = model_parallel_dim_name
    layouts = keras.distribution.LayoutMap(device_mesh)
    # EinsumDense kernels: (d, heads, key_dim) in, (heads, key_dim, d) out.
    layouts[r".*/(query|key|value|gate)/kernel$"] = (None, model, None)
    layouts[r".*/(query|key|value|gate)/bias$"] = (model, None)
    layouts[r".*/attention_output/kernel$"] = (model, None, None)
    layouts[r".*/feed_forward_1/kernel$"] = (None, model)
    layouts[r".*/feed_forward_1/bias$"] = (model,)
    layouts[r".*/feed_forward_2/kernel$"] = (model, None)
    return layouts

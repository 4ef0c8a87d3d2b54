"""The served models, protocol-free: per model and version, the one
artifact `keras_attn_runtime.opener` opens for its name (a SavedModel
through the op allowlist, a `.tflite` or `.onnx` file without
TensorFlow, a `.keras` file or a decoder-only model's bundle; for a
folder, the first in the opener's order, or the kind `--prefer` names),
what it can do, its signatures' requests merged into batches
(`Batcher`), each call on the model's one executor, and its admission.
It imports no protocol: the adapters reach a model through
`keras_attn_cli.serving.plane`, which runs the calls."""

import asyncio
import concurrent.futures
import time

import numpy as np

from keras_attn_cli.serving.admission import Admission
from keras_attn_cli.serving.limits import LOGGER, stream_limit

BATCHING = {"max_batch_size": 32, "batch_wait_ms": 5.0}


def load_backend(path, allow_unsafe=False, accelerator="cpu", prefer=None):
    """The artifact at `path` (`keras_attn_cli.loading.open_model`): a
    SavedModel folder, a `.tflite`, `.keras` or `.onnx` file, or a folder
    holding them, read in the opener's order or `prefer`'s kind first
    (`accelerator`: where LiteRT runs a `.tflite`)."""
    from keras_attn_cli.loading import open_model

    return open_model(
        path,
        accelerator,
        allow_unsafe=allow_unsafe,
        flag="MODEL",
        prefer=prefer,
    )


class Batcher:
    """Runs a signature on merged requests: a request waits at most
    `wait_s` for others, and a call holds at most `max_rows` examples
    (a larger request runs alone). Calls run one at a time on `executor`.
    `split(outputs, start, count)` gives each request its part of a
    merged call (`Signature.own_part`)."""

    def __init__(self, run, max_rows, wait_s, executor, split):
        self.run, self.max_rows, self.wait_s = run, max_rows, wait_s
        self.executor, self.split = executor, split
        self.pending = []
        self.worker = None

    async def submit(self, inputs):
        future = asyncio.get_running_loop().create_future()
        rows = len(next(iter(inputs.values())))
        self.pending.append((inputs, rows, future))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._work())
        return await future

    async def _work(self):
        loop = asyncio.get_running_loop()
        while self.pending:
            deadline = loop.time() + self.wait_s
            while (
                sum(r for _, r, _ in self.pending) < self.max_rows
                and loop.time() < deadline
            ):
                await asyncio.sleep(min(0.001, self.wait_s))
            taken, rows = [], 0
            while self.pending and (
                not taken or rows + self.pending[0][1] <= self.max_rows
            ):
                taken.append(self.pending.pop(0))
                rows += taken[-1][1]
            try:
                merged = {
                    key: np.concatenate([inputs[key] for inputs, _, _ in taken])
                    for key in taken[0][0]
                }
                out = await loop.run_in_executor(
                    self.executor, self.run, merged
                )
                results, start = [], 0
                for _, count, _ in taken:
                    alone = len(taken) == 1  # the call's own answer
                    results.append(
                        out if alone else self.split(out, start, count)
                    )
                    start += count
            except Exception as err:  # each waiting request gets the error
                results = [err] * len(taken)
            for (_, _, future), result in zip(taken, results, strict=True):
                if future.done():  # its client went away
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)


def batchers(backend, batching, executor):
    """`{signature: Batcher}` for the signatures whose requests merge
    (none with `max_batch_size` 1), each running on `executor`."""
    return {
        key: Batcher(
            lambda inputs, key=key: backend.run(key, inputs),
            batching["max_batch_size"],
            batching["batch_wait_ms"] / 1000,
            executor,
            signature.own_part,
        )
        for key, signature in backend.signatures.items()
        if signature.batched and batching["max_batch_size"] > 1
    }


class ServedModelState:
    """What a served model holds, protocol-free: `backend` (the opened
    artifact, the one engine that answers for this name at every door),
    `can` (what it can do, read once: `keras_attn_runtime.capabilities`),
    `limits`, the executor its calls run on one at a time, the
    `batchers` of its signatures and the `admission` of its generated
    answers. The KServe `Model` each protocol reaches it through
    (`keras_attn_cli.serving.kserve_model`) mixes it in."""

    def setup(self, name, backend, limits, batching, version=1):
        from keras_attn_runtime import capabilities

        # KServe registers the latest version as `name`, the others as
        # `name@version`.
        self.backend, self.limits = backend, limits
        self.public_name, self.version = name.split("@")[0], version
        self.can = capabilities.of(backend)
        self.executor = concurrent.futures.ThreadPoolExecutor(1)
        self.batchers = batchers(backend, batching, self.executor)
        self.admission = Admission(
            self.public_name,
            stream_limit(limits, self.can.capacity),
            limits["max_queue"],
        )


def _answering(path, backend):
    """Which file answers for `path` at every door, and why, where the
    folder holds more than one kind of model file."""
    from keras_attn_runtime.opener import kinds_in

    kinds = kinds_in(path)
    if len(kinds) < 2:
        return backend.path
    others = ", ".join(k for k in kinds if k != backend.kind)
    if backend.kind == kinds[0]:
        why = f"the folder's first kind; --prefer {others} serves that"
    else:
        why = f"named by --prefer; the folder also holds {others}"
    return f"{backend.path} ({backend.kind}, {why})"


def version_loader(make, limits, batching, log, opening):
    """`load(source, version, path) -> ServedModel` for the version
    watcher (`keras_attn_cli.serving.versions`): the artifact at `path`
    checked against its signature first (`opening["verify"]`, a
    `keras_attn_runtime.signing.Verifier`, when one is required), opened
    under the trust rules (`allow_unsafe`, `accelerator`, `prefer`, as
    `load_backend` takes them), made a served model by `make(name,
    backend, limits, batching, version)` and warmed up
    (`keras_attn_cli.serving.warmup`); one line told of it."""
    from keras_attn_cli.serving import warmup

    opening = dict(opening)
    verify = opening.pop("verify", None)

    def load(source, version, path):
        start = time.perf_counter()
        if verify is not None:
            verify(path)
        backend = load_backend(path, **opening)
        model = make(source.name, backend, limits, batching, version)
        loaded = time.perf_counter()
        calls, failure = warmup.warm_up(
            backend,
            lambda key, inputs: model.executor.submit(
                backend.run, key, inputs
            ).result(),
        )
        log(
            f"loaded {source.name} version {version} from "
            f"{_answering(path, backend)} in "
            f"{loaded - start:.1f} s, warmed up in "
            f"{time.perf_counter() - loaded:.1f} s ({calls} calls)"
        )
        if failure:
            LOGGER.warning(
                "%s version %s: a warm-up call on made-up inputs failed, "
                "served all the same: %s",
                source.name,
                version,
                failure,
            )
        return model

    return load

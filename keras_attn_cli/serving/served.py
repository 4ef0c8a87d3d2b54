"""The served models, under every protocol: one `ServedModel` (a KServe
`Model`) per model and version over the artifact `keras_attn_runtime.
opener` opens (a SavedModel through the op allowlist, a `.tflite` or
`.onnx` file without TensorFlow, a `.keras` file or a decoder-only
model's folder), its signatures' requests merged into batches
(`Batcher`), each call on the model's one executor. The protocols
(`tf_serving_api`, `open_inference`, `grpc_api`, `openai_routes`) call
`ServedModel.run`; `keras_attn_cli.serving.serve` runs the servers."""

import asyncio
import concurrent.futures
import time

import numpy as np

from keras_attn_cli.serving import open_inference as oip
from keras_attn_cli.serving import plane
from keras_attn_cli.serving import tf_serving_api as api
from keras_attn_cli.serving.limits import LOGGER, RequestError
from keras_attn_runtime.opener import ModelError, PromptTooLong

BATCHING = {"max_batch_size": 32, "batch_wait_ms": 5.0}


def load_backend(path, allow_unsafe=False, accelerator="cpu"):
    """The artifact at `path` (`keras_attn_cli.loading.open_model`): a
    SavedModel folder, a `.tflite`, `.keras` or `.onnx` file
    (`accelerator`: where LiteRT runs a `.tflite`)."""
    from keras_attn_cli.loading import open_model

    return open_model(
        path, accelerator, allow_unsafe=allow_unsafe, flag="MODEL"
    )


def streaming_companion(path, backend, accelerator="cpu"):
    """For a translator served from its folder's SavedModel: the folder's
    LiteRT file (`keras_attn_runtime.artifact.TRANSLATOR_FOLDER`), opened,
    when it has streaming signatures; OpenAI's routes then decode with it
    (streamed or not), every stream in one loop. Else `None`."""
    import os

    from keras_attn_runtime.artifact import TRANSLATOR_FOLDER
    from keras_attn_runtime.opener import is_saved_model, open_litert, streams

    if "translate" not in backend.signatures or streams(backend):
        return None
    folder = os.path.normpath(path)
    if (
        is_saved_model(folder)
        and os.path.basename(folder) == (TRANSLATOR_FOLDER["saved_model"])
    ):
        folder = os.path.dirname(folder)
    lite = os.path.join(folder, TRANSLATOR_FOLDER["litert"])
    if not os.path.isfile(lite):
        return None
    companion = open_litert(lite, accelerator)
    return companion if streams(companion) else None


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


def default_key(backend):
    """The signature KServe v2 calls (the plane's rule with none asked
    for: `serving_default`, else the first)."""
    return plane.signature_key(backend.signatures)


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


def served_model_class():
    """`ServedModel` subclasses `kserve.Model`, imported on first use."""
    import kserve
    from kserve import InferRequest
    from kserve.errors import InvalidInput

    class ServedModel(kserve.Model):
        """One model behind every protocol's routes."""

        def __init__(self, name, backend, limits, batching, version=1):
            super().__init__(name)
            # `generator`: what OpenAI's routes decode with (the backend,
            # or its `streaming_companion`). KServe registers the latest
            # version as `name`, the others as `name@version`.
            self.backend = self.generator = backend
            self.public_name, self.version = name.split("@")[0], version
            self.limits = limits
            self.executor = concurrent.futures.ThreadPoolExecutor(1)
            self.batchers = batchers(backend, batching, self.executor)
            self.ready = True

        def get_input_types(self):  # KServe v2 model metadata
            return oip.tensor_metadata(self._default().inputs)

        def get_output_types(self):
            return oip.tensor_metadata(self._default().outputs)

        def _default(self):
            return self.backend.signatures[default_key(self.backend)]

        async def predict(self, payload, headers=None):
            if isinstance(payload, InferRequest):
                return await self._infer(payload)
            signatures = self.backend.signatures
            try:
                # KServe parses JSON bodies sent as JSON; TensorFlow Serving
                # parses any body (curl -d sends a form content type).
                payload = api.parse_json(payload)
                key, inputs, form = api.parse_predict(
                    payload, signatures, self.limits
                )
                wanted = api.output_filter(
                    payload.get("output_filter"), signatures[key]
                )
            except RequestError as err:
                raise InvalidInput(str(err)) from None
            out = api.filtered(await self.run(key, inputs), wanted)
            return api.format_predict(out, form)

        async def run(self, key, inputs):
            """Signature `key` on `inputs`, merged where it can be."""
            return await run_signature(self, key, inputs)

        async def _infer(self, request):
            """KServe v2's infer (REST, binary extension, gRPC) on the
            default signature."""
            key = default_key(self.backend)
            wanted = [o.name for o in request.request_outputs or ()]
            try:
                tensors = [
                    (t.name, t.datatype, t.as_numpy()) for t in request.inputs
                ]
                signature = self.backend.signatures[key]
                inputs = oip.parse_infer(tensors, signature, self.limits)
                out = oip.infer_outputs(
                    await self.run(key, inputs), wanted or None
                )
            except (ValueError, TypeError) as err:  # RequestError included
                raise InvalidInput(str(err)) from None
            return v2_response(request, self.name, out)

    return ServedModel


async def run_signature(model, key, inputs):
    """`ServedModel.run`: signature `key` of `model` on `inputs`, merged
    with other requests where it can be, on the model's executor. A text
    past the model's window is an `InvalidInput` before any model work
    (`check_prompts`); the model's own failure an `InferenceError`."""
    from kserve.errors import InferenceError, InvalidInput

    try:
        check_prompts(model.backend, inputs)
    except PromptTooLong as err:
        raise InvalidInput(str(err)) from None
    try:
        if key in model.batchers:
            out = await model.batchers[key].submit(inputs)
        else:
            loop = asyncio.get_running_loop()
            out = await loop.run_in_executor(
                model.executor, model.backend.run, key, inputs
            )
    except ModelError as err:
        raise InferenceError(model_error(err)) from None
    check_truncated(out)
    return out


def check_truncated(outputs):
    """An `InvalidInput` for a request one of whose texts the model read
    only the start of (a translator's `source_truncated` output, on the
    request's own rows): refused naming the window, as the command line
    and OpenAI's routes refuse it, rather than answered in part."""
    from kserve.errors import InvalidInput

    cut = outputs.get("source_truncated")
    if cut is None or not np.asarray(cut).any():
        return
    limit = np.asarray(outputs.get("source_length", [0])).reshape(-1)[0]
    if not limit and "attention" in outputs:
        limit = np.asarray(outputs["attention"]).shape[-1]
    raise InvalidInput(
        f"Expected at most {int(limit)} source tokens a sentence or clause "
        "(the model's window; the translator reads no more). Received: a "
        "text with a longer one; split it into shorter sentences"
    )


def check_prompts(backend, inputs):
    """A `PromptTooLong` for a text of `inputs` longer than `backend`'s
    window (its `check_prompt`, where it has one): checked before the
    text is merged with others, whose calls it must not fail."""
    check = getattr(backend, "check_prompt", None)
    if check is None or "text" not in inputs:
        return
    for text in np.asarray(inputs["text"]).reshape(-1):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        check(str(text))


def v2_response(request, model_name, outputs):
    """KServe's `InferResponse` holding `outputs` (`[(name, datatype,
    array)]`), binary where the request asked for it."""
    from kserve import InferOutput, InferResponse

    binary = request.use_binary_outputs
    tensors = []
    for name, kind, array in outputs:
        tensor = InferOutput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array, binary_data=binary)
        tensors.append(tensor)
    return InferResponse(
        response_id=request.id or "",
        model_name=model_name,
        infer_outputs=tensors,
        use_binary_outputs=binary,
    )


def model_error(err):
    from keras_attn_cli.tf_errors import op_error_line

    return f"The model failed to run: {op_error_line(str(err))}"


def version_loader(
    limits, batching, log, allow_unsafe, accelerator, verify=None
):
    """`load(source, version, path) -> ServedModel` for the version
    watcher (`keras_attn_cli.serving.versions`): the artifact at `path`
    checked against its signature first (`verify`, a
    `keras_attn_runtime.signing.Verifier`, when one is required), opened
    under the trust rules, given its streaming companion and warmed up
    (`keras_attn_cli.serving.warmup`); one line told of it."""
    from keras_attn_cli.serving import warmup

    ServedModel = served_model_class()

    def load(source, version, path):
        start = time.perf_counter()
        if verify is not None:
            verify(path)
        backend = load_backend(path, allow_unsafe, accelerator)
        model = ServedModel(source.name, backend, limits, batching, version)
        model.generator = streaming_companion(path, backend, accelerator)
        model.generator = model.generator or backend
        loaded = time.perf_counter()
        calls, failure = warmup.warm_up(
            backend,
            model.generator,
            lambda key, inputs: model.executor.submit(
                backend.run, key, inputs
            ).result(),
        )
        log(
            f"loaded {source.name} version {version} from {path} in "
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

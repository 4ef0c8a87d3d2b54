"""KServe's `Model` for each served model: the hooks KServe's routes
call, an adapter like the others. TensorFlow Serving's REST `:predict`
(KServe's V1 route) and KServe v2's infer (REST, binary extension,
gRPC) each parse their request (`tf_serving_api`, `open_inference`),
run it through the plane (`plane.predict`) and format the answer; the
model's state is `served.ServedModelState`."""

from keras_attn_cli.serving import open_inference as oip
from keras_attn_cli.serving import plane
from keras_attn_cli.serving import tf_serving_api as api
from keras_attn_cli.serving.served import ServedModelState


def default_key(backend):
    """The signature KServe v2 calls (the plane's rule with none asked
    for: `serving_default`, else the first)."""
    return plane.signature_key(backend.signatures)


def served_model_class():
    """`ServedModel` subclasses `kserve.Model`, imported on first use."""
    import kserve
    from kserve import InferRequest

    class ServedModel(ServedModelState, kserve.Model):
        """One model behind every protocol's routes."""

        def __init__(self, name, backend, limits, batching, version=1):
            kserve.Model.__init__(self, name)
            self.setup(name, backend, limits, batching, version)
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
            # KServe parses JSON bodies sent as JSON; TensorFlow Serving
            # parses any body (curl -d sends a form content type).
            payload = api.parse_json(payload)
            key, inputs, form = api.parse_predict(
                payload, signatures, self.limits
            )
            wanted = api.output_filter(
                payload.get("output_filter"), signatures[key]
            )
            out = await plane.predict(self, key, inputs)
            return api.format_predict(api.filtered(out, wanted), form)

        async def _infer(self, request):
            """KServe v2's infer on the default signature."""
            key = default_key(self.backend)
            wanted = [o.name for o in request.request_outputs or ()]
            tensors = []
            try:
                for t in request.inputs:
                    tensors.append((t.name, t.datatype, t.as_numpy()))
            except (ValueError, TypeError) as err:
                raise plane.RequestError(str(err)) from None
            signature = self.backend.signatures[key]
            inputs = oip.parse_infer(tensors, signature, self.limits)
            out = await plane.predict(self, key, inputs)
            return oip.v2_response(
                request, self.name, oip.infer_outputs(out, wanted or None)
            )

    return ServedModel

"""`keras-attn serve`: the served models under TensorFlow Serving's,
KServe v2's and OpenAI's protocols, over REST and gRPC.

One plane (`plane`: which model, which signature, the calls, what an
error answers), its owners (`registry`, `limits`, `access`,
`connections`, `admission`, `served`: a model's state), thin protocol
adapters (`kserve_model`, `tf_serving_api` and `http_routes`, `open_inference`,
`grpc_api` with `tensor_protos`, `openai_api` with `openai_events`, and
`openai_routes`), the
OpenAPI document (`openapi_document`) and the servers (`serve`).
"""

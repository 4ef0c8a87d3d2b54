"""Loading model files that need TensorFlow and Keras, and the checks
that come before: `opener` registers the SavedModel and `.keras` kinds
with `keras_attn_runtime.opener` (which owns every other kind), `trust`
checks a SavedModel's files and ops before it loads, and `allowed_ops`
is the op allowlist it checks against."""

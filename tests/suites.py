"""The test files of the layer suite, which the other backends' runs
(JAX, PyTorch) and the next Keras's run repeat."""

LAYER_SUITE = [
    "tests/layers/test_attention.py",
    "tests/layers/test_structured_self_attention.py",
    "tests/layers/test_masking_after_rnn.py",
    "tests/layers/test_multi_head_positional.py",
    "tests/ops/test_positional.py",
    "tests/layers/test_bad_input.py",
    "tests/layers/test_precision.py",
    "tests/ops/test_ops.py",
    "tests/layers/test_keras_parity_bugs.py",
    "tests/layers/test_keras_superset.py",
    "tests/layers/test_keras_machinery.py",
    "tests/seq2seq/test_search.py",
    "tests/seq2seq/test_search_parity.py",
    "tests/seq2seq/test_contrastive.py",
    "tests/seq2seq/test_samplers.py",
    "tests/seq2seq/test_multilabel.py",
    "tests/seq2seq/test_monotonic.py",
    "tests/seq2seq/test_scheduled_sampling.py",
    "tests/seq2seq/test_mechanisms.py",
    "tests/seq2seq/test_seq2seq_ensemble.py",
    "tests/seq2seq/test_attention_decoder.py",
    "tests/seq2seq/test_tfa_attention_wrapper.py",
    "tests/layers/test_mhp_cache.py",
    "tests/layers/test_decode_rows.py",
    "tests/layers/test_cache_policies.py",
    "tests/layers/test_declared_arguments.py",
    "tests/layers/test_positions_heads.py",
    "tests/layers/test_grouped_query.py",
    "tests/layers/test_initial_weights.py",
    "tests/layers/test_compiled.py",
    "tests/seq2seq/test_decoder_calls.py",
    "tests/layers/test_position_layers.py",
    "tests/layers/test_float64.py",
    "tests/layers/test_non_finite_padding.py",
    "tests/seq2seq/test_sequence_loss.py",
    "tests/seq2seq/test_docs_seq2seq.py",
    "tests/training/test_distribute.py",
    "tests/test_explain_attribution.py",
]


def backend_env(backend, compile_cache):
    """The environment variables of a subprocess that runs tests on
    `backend`, on the CPU.

    JAX keeps the programs it compiles in the folder `compile_cache` and
    reads them back by their contents. The suite compiles many programs
    equal to one compiled before (a loop's body is a new Python function
    at every call, which JAX's own cache tells apart), and on JAX
    compiling is most of the suite's time. Let one process at a time
    use a folder (a test's `tmp_path`): the cache takes no lock when two
    processes write at once.
    """
    return {
        "KERAS_BACKEND": backend,
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "JAX_COMPILATION_CACHE_DIR": str(compile_cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }

"""How the CLI loads and runs models: the loaders (the contracts they
check are `keras_attn.loading.opener`'s), the run harness (a model's errors in
one line, `keras_attn_cli.tf_errors`) and `open_model`, through which every
command and `serve` open a file. Finding and naming them is
`keras_attn_cli.finding`'s."""

import os

import numpy as np

from keras_attn_runtime.artifact import TRANSLATOR_FOLDER
from keras_attn_runtime.opener import is_saved_model


def load_classifier(path):
    """A `.keras` raw-text classifier: one string input, a dict output
    with `probability` (the documented contract), opened as every model
    is (`open_model`)."""
    from keras_attn.loading.opener import check_classifier

    model = getattr(open_model(path, flag="--model"), "model", None)
    check_classifier(model, path)
    return model


def run_model(fn, *args):
    """Call TensorFlow; its runtime errors become one clean line. The call
    runs on a worker thread while this one waits in short steps, so that
    Ctrl-C acts at once (a TensorFlow op does not return to Python, where
    the interrupt is raised, until it ends: 9 s for a long translation)."""
    import tensorflow as tf

    from keras_attn_cli.tf_errors import memory_failure, op_error_line

    try:
        return interruptible(fn, *args)
    except tf.errors.OpError as err:
        message = err.message or str(err)
        kind = "" if memory_failure(message) else f" ({type(err).__name__})"
        raise ValueError(
            f"The model failed to run{kind}: {op_error_line(message)}"
        ) from None


def interruptible(fn, *args):
    """`fn(*args)` on a daemon thread, waited for in steps of 0.1 s: a
    `KeyboardInterrupt` reaches this thread between steps, whatever `fn`
    is doing (it is left to end with the process)."""
    import concurrent.futures
    import threading

    future = concurrent.futures.Future()

    def work():
        try:
            future.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 (handed to the caller)
            future.set_exception(err)

    threading.Thread(target=work, daemon=True, name="keras-attn-model").start()
    while True:
        try:
            return future.result(timeout=0.1)
        except concurrent.futures.TimeoutError:
            continue


def known_words(model, texts):
    """Per text, how many tokens the model's vocabulary knows."""
    from keras_attn.explain import find_vectorizer

    vec = find_vectorizer(model)
    ids = np.asarray(run_model(vec, np.array(texts, dtype=object)))
    return (ids > 1).sum(axis=-1)


def load_translator(path, allow_unsafe=False):
    """The `translate` function of a translator SavedModel (the folder or
    its parent), opened as every model is (`open_model`)."""
    inside = os.path.join(path, TRANSLATOR_FOLDER["saved_model"])
    if os.path.isdir(inside):
        path = inside
    if not is_saved_model(path):
        raise ValueError(
            f"No SavedModel translator in {path!r} (no saved_model.pb)."
        )
    from keras_attn.loading.opener import signature_of

    artifact = open_model(path, allow_unsafe=allow_unsafe, flag="--model")
    return signature_of(
        artifact.loaded,
        path,
        "translate",
        "a translator SavedModel (`keras-attn predict` runs a classifier)",
    )


def _tensorflow_loader(kind):
    """A loader of `kind` for `keras_attn_runtime.opener.register` that
    imports TensorFlow and Keras (`keras_attn.loading.opener`) only when
    a file of that kind is opened: serving a LiteRT file never imports them."""

    def load(path, allow_unsafe):
        from keras_attn.loading import opener

        return opener.open_tensorflow_kind(kind, path, allow_unsafe)

    return load


def open_model(path, accelerator="cpu", vocabulary_path=None, **settings):
    """`keras_attn_runtime.opener.open` with the TensorFlow kinds
    registered (lazily): how every command and `serve` open a model file.
    `settings`: `allow_unsafe`, `flag` and `prefer`, as `open` takes
    them."""
    from keras_attn_runtime import opener

    for kind in set(opener.TENSORFLOW_KINDS) - set(opener.registered()):
        opener.register(kind, _tensorflow_loader(kind))
    return opener.open(path, accelerator, vocabulary_path, **settings)


def open_litert_translator(path, flag="--model"):
    """The `keras_attn_runtime.LiteRTTranslator` of the LiteRT translator
    file at `path`, opened as every model is (`open_model`); a
    `ValueError` naming `flag` for a file that is not one."""
    artifact = open_model(path, flag=flag)
    translator = getattr(artifact, "translator", None)
    if translator is None:
        raise ValueError(
            f"Expected a LiteRT translator file. Received: {flag}={path!r}, "
            f"a {artifact.kind} model with signatures "
            f"{sorted(artifact.signatures)}"
        )
    return translator

"""Compatibility with earlier versions lives in one place per
distribution (`keras_attn.legacy`, `keras_attn_runtime.legacy`), each
item with the version that removes it: these tests fail once a package's
version reaches an item's removal, so that the item is deleted then.
What each item reads is tested beside its area (0.1 `.keras` files in
`tests/layers/`, 0.2 translator files in `tests/runtime/`)."""

import importlib

import pytest
from packaging.version import Version

import keras_attn
import keras_attn_runtime
from keras_attn import legacy
from keras_attn.legacy import modules as legacy_modules
from keras_attn_runtime import legacy as runtime_legacy


@pytest.mark.parametrize("what, where, removed_in", legacy.REMOVALS)
def test_each_library_item_names_its_module_and_is_not_yet_due(
    what, where, removed_in
):
    assert where.startswith("keras_attn.legacy."), where
    assert importlib.import_module(where).__doc__, where
    assert Version(keras_attn.__version__) < Version(removed_in), (
        f"{what}: due for removal in {removed_in}"
    )


@pytest.mark.parametrize("what, function, removed_in", runtime_legacy.REMOVALS)
def test_each_runtime_item_names_its_function_and_is_not_yet_due(
    what, function, removed_in
):
    assert callable(getattr(runtime_legacy, function)), function
    assert Version(keras_attn_runtime.__version__) < Version(removed_in), (
        f"{what}: due for removal in {removed_in}"
    )


def test_every_legacy_module_is_listed():
    import pkgutil

    listed = {where for _, where, _ in legacy.REMOVALS}
    found = {
        f"keras_attn.legacy.{m.name}"
        for m in pkgutil.iter_modules(legacy.__path__)
    }
    assert found == listed


def test_a_0_2_translator_config_reads_as_a_translator():
    from keras_attn_runtime import artifact

    assert artifact.format_of({"kind": "translator"}) == artifact.TRANSLATOR
    assert artifact.format_of({"kind": "other"}) is None
    assert artifact.format_of({"format": "x", "kind": "translator"}) == "x"


def test_an_older_saved_model_knows_words_where_it_attends():
    import numpy as np

    from keras_attn.legacy import saved_models

    attention = np.array([[0.0, 0.0], [0.2, 0.8]])
    assert saved_models.known_words({"attention": attention}, 2) == [0, 1]
    assert saved_models.known_words({}, 3) == [1, 1, 1]


def test_moved_seq2seq_names_warn_and_resolve():
    import keras_attn.seq2seq as seq2seq
    from keras_attn.translation import Translator

    with pytest.warns(DeprecationWarning, match="keras_attn.translation"):
        assert seq2seq.Translator is Translator
    with pytest.raises(AttributeError, match="no_such_name"):
        seq2seq.no_such_name  # noqa: B018


def test_options_by_position_still_reach_the_exporter_with_a_warning():
    from keras_attn.legacy import exports

    @exports.options_by_position("overwrite", "quantize")
    def export_x(obj, path, *, overwrite=False, quantize="none"):
        return obj, path, overwrite, quantize

    assert export_x(1, "p", overwrite=True) == (1, "p", True, "none")
    with pytest.warns(DeprecationWarning, match="overwrite, quantize"):
        assert export_x(1, "p", True, "dynamic") == (1, "p", True, "dynamic")
    with pytest.raises(TypeError, match="multiple values for argument"):
        export_x(1, "p", True, overwrite=False)
    with pytest.raises(TypeError, match="at most 2 options"):
        export_x(1, "p", True, "dynamic", 3)


def test_a_streaming_export_with_the_path_first_is_reordered():
    from keras_attn.legacy import exports

    @exports.streaming_path_first(("overwrite",))
    def export_s(decoder, path, *, start_signature, overwrite=False):
        return decoder, path, start_signature, overwrite

    def start():
        pass

    def step():
        pass

    new = export_s((start, step), "f.tflite", start_signature={"a": 1})
    with pytest.warns(DeprecationWarning, match=r"\(start, step_fn\), path"):
        old = export_s("f.tflite", start, step, {"a": 1}, True)
    assert new == ((start, step), "f.tflite", {"a": 1}, False)
    assert old == ((start, step), "f.tflite", {"a": 1}, True)


def test_the_streaming_translator_export_moved_with_a_warning():
    import keras_attn.export as export
    from keras_attn.translation import export_streaming_translator

    with pytest.warns(DeprecationWarning, match="keras_attn.translation"):
        assert export.export_streaming_translator is export_streaming_translator
    with pytest.raises(AttributeError, match="no_such_exporter"):
        export.no_such_exporter  # noqa: B018


@pytest.fixture(scope="module")
def moved_modules():
    """`{old: None, or what failed}` for every moved module, each
    imported by its old path first in one fresh process (this one has
    imported the new paths already), its warnings recorded."""
    import json
    import subprocess
    import sys

    code = (
        "import importlib, json, sys, warnings\n"
        "found = {}\n"
        "for old, new in json.loads(sys.argv[1]).items():\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        warnings.simplefilter('always')\n"
        "        before = importlib.import_module(old)\n"
        "    messages = [str(w.message) for w in seen\n"
        "                if w.category is DeprecationWarning]\n"
        "    if before is not importlib.import_module(new):\n"
        "        found[old] = f'{before!r} is not {new}'\n"
        "    elif not any(new in m for m in messages):\n"
        "        found[old] = f'no warning naming {new}: {messages}'\n"
        "    else:\n"
        "        found[old] = None\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(legacy_modules.MOVED)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("old, new", sorted(legacy_modules.MOVED.items()))
def test_a_moved_module_is_its_new_module_and_warns(moved_modules, old, new):
    assert old in moved_modules
    assert moved_modules[old] is None, moved_modules[old]


def test_from_the_package_a_moved_module_is_its_new_module():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from keras_attn import trust
    from keras_attn.loading import trust as moved

    assert trust is moved
    assert callable(trust.check_saved_model)

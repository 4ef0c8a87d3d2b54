"""Every `keras_attn…` name the README and docs/ give resolves: a module,
or an attribute of one, that a user can import as written."""

import glob
import importlib
import os
import re

import pytest

from tests.paths import ROOT

# A dotted name in backticks, maybe called: `keras_attn.export.edge_targets`,
# `keras_attn_runtime.LiteRTClassifier(...)`.
NAME = re.compile(r"`(keras_attn(?:_cli|_runtime)?(?:\.[A-Za-z_][\w]*)+)")
# Pages that record the past (names that existed then) are not read.
PAGES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    if not os.path.basename(p).endswith("-history.md")
)


def resolves(name):
    """Whether `name` is a module or an attribute chain from one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def names_in(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return sorted(set(NAME.findall(f.read())))


def metadata_keys():
    """The artifact format's metadata entry names (`keras_attn.config`,
    ...): file contents, not Python names."""
    import keras_attn_runtime

    return {
        getattr(keras_attn_runtime, name)
        for name in dir(keras_attn_runtime)
        if name.startswith("METADATA_")
    }


@pytest.mark.parametrize("page", PAGES)
def test_every_keras_attn_name_in_the_docs_resolves(page):
    keys = metadata_keys()
    missing = [
        name
        for name in names_in(page)
        if name not in keys and not resolves(name)
    ]
    assert not missing, f"{page} names what does not exist: {missing}"


def test_the_check_can_fail():
    assert resolves("keras_attn_runtime.engine.LiteRTModel")
    assert resolves("keras_attn.export.length_axes")
    assert not resolves("keras_attn.litert_runtime")
    assert not resolves("keras_attn_runtime.LiteRTClassifier.no_such_method")


# Names the CHANGELOG records as former, each with the name that replaced
# it (which must resolve): any other name it gives must resolve.
FORMER = {
    "keras_attn.attention": "keras_attn.layers.attention",
    "keras_attn.decoding": "keras_attn.seq2seq.greedy_search",
    "keras_attn.edge_targets": "keras_attn.export.edge_targets",
    "keras_attn.export.translator_file": "keras_attn.translation.files",
    "keras_attn.seq2seq.contrastive": "keras_attn.seq2seq.contrastive_search",
    "keras_attn.seq2seq.multilabel": "keras_attn.seq2seq.multilabel_search",
    "keras_attn.tf_errors": "keras_attn_cli.tf_errors",
    "keras_attn_cli.models": "keras_attn_cli.loading",
    "keras_attn_cli.serve": "keras_attn_cli.serving.serve",
}


def test_the_changelog_names_what_exists_or_what_it_replaced():
    keys = metadata_keys()
    names = names_in("CHANGELOG.md")
    missing = {n for n in names if n not in keys and not resolves(n)}
    unknown = sorted(missing - set(FORMER))
    assert not unknown, f"CHANGELOG.md names what does not exist: {unknown}"
    for former, now in FORMER.items():
        assert former in names, f"{former} is no longer in CHANGELOG.md"
        assert not resolves(former), f"{former} exists: not a former name"
        assert resolves(now), f"{former}'s replacement {now} does not resolve"

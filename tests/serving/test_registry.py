"""The one version lookup of `keras-attn serve`, on its own."""

import types

import pytest

from keras_attn_cli.serving import registry


def served(name, version):
    return types.SimpleNamespace(public_name=name, version=version)


MODELS = {
    "scorer": served("scorer", 2),
    "scorer@1": served("scorer", 1),
    "other": served("other", 1),
}


def test_the_table_maps_each_version_to_its_registered_name():
    assert registry.version_table(MODELS) == {
        "scorer": {"2": "scorer", "1": "scorer@1"},
        "other": {"1": "other"},
    }


def test_a_name_alone_is_the_latest_and_a_number_pins_one():
    table = registry.version_table(MODELS)
    assert registry.lookup(table, "scorer") == "scorer"
    assert registry.lookup(table, "scorer", version=1) == "scorer@1"
    assert registry.lookup(table, "scorer", version="2") == "scorer"


@pytest.mark.parametrize(
    "name, settings, needle",
    [
        ("nope", {}, "Unknown model 'nope'; served: ['other', 'scorer']"),
        ("scorer", {"version": 3}, "no version '3'; served: versions [1, 2]"),
        ("scorer", {"label": "stable"}, "no version label 'stable'"),
    ],
)
def test_what_is_not_served_says_what_is(name, settings, needle):
    with pytest.raises(registry.NotServed, match=needle.replace("[", r"\[")):
        registry.lookup(registry.version_table(MODELS), name, **settings)

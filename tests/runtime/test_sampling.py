"""The sampling parameters named once (`keras_attn_runtime.sampling`):
each reader (the Keras sampler settings, the runtime's sampler, OpenAI's
parser, the OpenAPI document) refuses what the table refuses, in the
table's words, and the document shows the table's ranges."""

import pytest

from keras_attn_runtime import sampling

BAD = [
    ("temperature", 0),
    ("temperature", -1.5),
    ("temperature", True),
    ("top_k", 0),
    ("top_k", 2.5),
    ("top_p", 0),
    ("top_p", 1.01),
    ("seed", 1.5),
]


@pytest.mark.parametrize("name, value", BAD)
def test_the_table_refuses_a_value_out_of_range_naming_it(name, value):
    with pytest.raises(ValueError, match=f"Received: {name}={value!r}$"):
        sampling.check(name, value)


def test_the_table_takes_its_defaults_and_values_in_range():
    assert sampling.read({}) == {
        "temperature": 1.0,
        "top_k": None,
        "top_p": 1.0,
        "seed": None,
    }
    got = sampling.read({"temperature": 2, "top_k": 5, "top_p": 1, "seed": 3})
    assert got == {"temperature": 2.0, "top_k": 5, "top_p": 1.0, "seed": 3}
    assert isinstance(got["temperature"], float)
    with pytest.raises(ValueError, match="among"):
        sampling.read({"temp": 1})


@pytest.mark.parametrize("name, value", BAD)
def test_the_runtime_sampler_refuses_in_the_tables_words(name, value):
    from keras_attn_runtime.generator import chooser

    with pytest.raises(ValueError) as err:
        chooser({name: value})
    with pytest.raises(ValueError) as table:
        sampling.check(name, value)
    assert str(err.value) == str(table.value)


@pytest.mark.parametrize("name, value", BAD)
def test_the_keras_sampler_settings_refuse_in_the_tables_words(name, value):
    pytest.importorskip("keras")
    from keras_attn.models import Sampling

    with pytest.raises(ValueError) as err:
        Sampling(**{name: value})
    with pytest.raises(ValueError) as table:
        sampling.check(name, value)
    assert str(err.value) == str(table.value)


def test_the_openapi_document_shows_the_tables_ranges():
    pytest.importorskip("fastapi")
    from keras_attn_cli.serving import openai_api, openapi_document

    fields = openapi_document._SAMPLING
    assert fields["top_p"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
    }
    assert fields["seed"] == {"type": "integer"}
    assert fields["top_k"]["type"] == "integer"
    assert fields["n"]["maximum"] == openai_api.MAX_CHOICES
    stop = fields["stop"]["oneOf"][1]
    assert stop["maxItems"] == openai_api.MAX_STOPS


def test_openai_refuses_the_tables_values_naming_the_field():
    from keras_attn_cli.serving import openai_api

    body = {"model": "m", "prompt": "Hi.", "temperature": 1, "top_p": 0}
    with pytest.raises(openai_api.OpenAIError) as err:
        openai_api.parse_request(body, lambda name: object(), chat=False)
    assert err.value.param == "top_p"
    assert "Expected top_p to be in (0, 1]" in str(err.value)

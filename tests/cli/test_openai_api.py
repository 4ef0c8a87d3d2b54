"""OpenAI's API on `keras-attn serve`: the rules on their own (fast), and
the server as OpenAI's own Python client sees it (slow): completions and
chat completions, whole and streamed, their limits and their errors."""

import json
import os
import signal

import pytest

from keras_attn_cli import openai_api as oa
from keras_attn_runtime.signature import Signature

TRANSLATOR = Signature(
    {"text": ("string", [None])}, {"translation": ("string", [None])}
)
CLASSIFIER = Signature(
    {"text": ("string", [None])}, {"probability": ("float32", [None, 1])}
)
GENERATIVE = {"translator"}


def test_only_a_model_with_a_text_translate_signature_is_generative():
    assert oa.is_generative({"translate": TRANSLATOR})
    assert not oa.is_generative({"serving_default": CLASSIFIER})
    assert not oa.is_generative({"translate": CLASSIFIER})


def test_a_completion_request_is_read_with_openais_defaults():
    got = oa.parse_request(
        {"model": "translator", "prompt": ["Hi."]}, GENERATIVE
    )
    assert got == {
        "model": "translator",
        "prompt": "Hi.",
        "max_tokens": None,
        "stop": [],
        "stream": False,
        "include_usage": False,
    }
    chat = oa.parse_request(
        {
            "model": "translator",
            "messages": [
                {"role": "system", "content": "Translate."},
                {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
            ],
            "max_completion_tokens": 3,
            "stop": "x",
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
            "seed": 4,
        },
        GENERATIVE,
        chat=True,
    )
    assert chat["prompt"] == "Hi." and chat["max_tokens"] == 3
    assert chat["stop"] == ["x"] and chat["stream"] and chat["include_usage"]


@pytest.mark.parametrize(
    "body, param, status",
    [
        ({"model": "nope", "prompt": "Hi."}, "model", 404),
        ({"model": "translator", "prompt": 3}, "prompt", 400),
        ({"model": "translator", "prompt": "🎬"}, "prompt", 400),
        (
            {"model": "translator", "prompt": "Hi.", "max_tokens": 0},
            "max_tokens",
            400,
        ),
        (
            {"model": "translator", "prompt": "Hi.", "max_tokens": True},
            "max_tokens",
            400,
        ),
        (
            {"model": "translator", "prompt": "Hi.", "temperature": 0.7},
            "temperature",
            400,
        ),
        ({"model": "translator", "prompt": "Hi.", "n": 2}, "n", 400),
        (
            {"model": "translator", "prompt": "Hi.", "stop": ["a"] * 5},
            "stop",
            400,
        ),
        (
            {"model": "translator", "prompt": "Hi.", "stream": "yes"},
            "stream",
            400,
        ),
    ],
)
def test_a_bad_request_is_refused_naming_its_parameter(body, param, status):
    with pytest.raises(oa.OpenAIError) as info:
        oa.parse_request(body, GENERATIVE)
    assert info.value.param == param and info.value.status == status
    error = oa.error_body(info.value)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_a_chat_must_end_with_the_users_message():
    body = {
        "model": "translator",
        "messages": [{"role": "assistant", "content": "x"}],
    }
    with pytest.raises(oa.OpenAIError, match="last message"):
        oa.parse_request(body, GENERATIVE, chat=True)


def test_stop_and_max_tokens_cut_the_answer_and_say_why():
    text = "Je suis très fatigué ce soir."
    assert oa.finished(text) == (text, "stop")
    assert oa.finished(text, max_tokens=2) == ("Je suis", "length")
    assert oa.finished(text, stop=["très", "soir"]) == ("Je suis", "stop")
    assert oa.usage("I am tired.", "Je suis") == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
    }


def events(stream):
    return [
        json.loads(line[len("data: ") :])
        for line in "".join(stream).split("\n\n")
        if line.startswith("data: {")
    ]


def test_a_stream_joins_to_the_whole_answer():
    settings = {
        "model": "translator",
        "prompt": "I am tired.",
        "include_usage": True,
    }
    text = "Je suis fatigué."
    stream = list(oa.chunks(settings, text, "stop", chat=True))
    assert stream[-1] == "data: [DONE]\n\n"
    got = events(stream)
    assert got[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(
        e["choices"][0]["delta"].get("content", "") for e in got[:-1]
    )
    assert content == text
    assert got[-2]["choices"][0]["finish_reason"] == "stop"
    assert got[-1]["usage"]["completion_tokens"] == 3
    assert all(e["object"] == "chat.completion.chunk" for e in got)
    plain = events(
        oa.chunks({**settings, "include_usage": False}, text, "length")
    )
    assert "".join(e["choices"][0]["text"] for e in plain) == text
    assert plain[-1]["choices"][0]["finish_reason"] == "length"


# --- The server, as OpenAI's client sees it (slow tier). ---


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("kserve")
    openai = pytest.importorskip("openai")
    from tests.cli.test_serve import SHIPPED, start

    if not os.path.isdir(os.path.join(SHIPPED, "translation_en_fr")):
        pytest.skip("no shipped translator")
    proc, port = start("translation_en_fr", "imdb_micro")
    yield openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/openai/v1", api_key="-"
    )
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


SENTENCES = ["I am tired.", "We will go to the station tomorrow morning."]


def translations(sentences):
    """What `keras-attn translate` answers (the SavedModel's beam)."""
    import tensorflow as tf

    from tests.cli.test_serve import SHIPPED

    loaded = tf.saved_model.load(
        os.path.join(SHIPPED, "translation_en_fr", "saved_model")
    )
    out = loaded.signatures["translate"](tf.constant(sentences))["translation"]
    return [t.decode() for t in out.numpy()]


@pytest.mark.slow
def test_completions_answer_as_keras_attn_translate(client):
    want = translations(SENTENCES)
    assert [m.id for m in client.models.list().data] == ["translation_en_fr"]
    for sentence, french in zip(SENTENCES, want, strict=True):
        got = client.completions.create(
            model="translation_en_fr", prompt=sentence
        )
        assert got.choices[0].text == french
        assert got.choices[0].finish_reason == "stop"
        assert got.usage.completion_tokens == len(french.split())
        chat = client.chat.completions.create(
            model="translation_en_fr",
            messages=[{"role": "user", "content": sentence}],
            temperature=0,
            seed=1,
        )
        assert chat.choices[0].message.content == french
        assert chat.choices[0].message.role == "assistant"


@pytest.mark.slow
def test_a_stream_gives_the_same_words_then_done(client):
    (french,) = translations(SENTENCES[1:])
    parts, reasons = [], []
    stream = client.chat.completions.create(
        model="translation_en_fr",
        messages=[{"role": "user", "content": SENTENCES[1]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
    assert "".join(parts) == french
    assert reasons[-1] == "stop" and usage.completion_tokens == len(
        french.split()
    )
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="translation_en_fr",
            prompt=SENTENCES[1],
            stream=True,
            max_tokens=2,
        )
    )
    assert text == " ".join(french.split()[:2])


@pytest.mark.slow
def test_limits_and_errors_in_openais_form(client):
    import openai

    got = client.completions.create(
        model="translation_en_fr", prompt=SENTENCES[1], max_tokens=2
    )
    assert got.choices[0].finish_reason == "length"
    assert len(got.choices[0].text.split()) == 2
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="imdb_micro", prompt="Hi.")
    assert "imdb_micro" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(
            model="translation_en_fr", prompt="Hi.", temperature=0.8
        )
    assert info.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="translation_en_fr",
            messages=[{"role": "user", "content": "🎬"}],
        )

"""OpenAI's API on `keras-attn serve`: the rules on their own (fast), and
the server as OpenAI's own Python client sees it (slow): completions and
chat completions, whole and streamed, their limits and their errors."""

import json
import os
import signal
import types

import pytest

from keras_attn_cli.serving import openai_api as oa
from keras_attn_cli.serving import openai_events as oe
from keras_attn_runtime.signature import Signature

TRANSLATOR = Signature(
    {"text": ("string", [None])}, {"translation": ("string", [None])}
)
CLASSIFIER = Signature(
    {"text": ("string", [None])}, {"probability": ("float32", [None, 1])}
)
SERVED = {
    "translator": types.SimpleNamespace(public_name="translator", version=1)
}


def FIND(name):  # noqa: N802  (the plane's lookup, as the routes pass it)
    from keras_attn_cli.serving import plane

    return plane.find(SERVED, name)


GENERATOR = Signature(
    {"text": ("string", [None])}, {"completion": ("string", [None])}
)


def test_a_text_translate_or_generate_signature_is_generative():
    assert oa.is_generative({"translate": TRANSLATOR})
    from keras_attn_cli.serving.plane import generative_signature

    assert generative_signature({"generate": GENERATOR}) == (
        "generate",
        "completion",
    )
    assert not oa.is_generative({"serving_default": CLASSIFIER})
    assert not oa.is_generative({"translate": CLASSIFIER})
    assert not oa.is_generative({"generate": TRANSLATOR})


def streamed(settings, pieces, chat=False):
    """`stream_events` over `pieces` given one by one, collected."""
    import asyncio

    async def given():
        for piece in pieces:
            yield piece

    async def collect():
        return [e async for e in oe.stream_events(settings, given(), chat)]

    return asyncio.run(collect())


def test_a_token_stream_is_cut_at_a_stop_string_across_pieces():
    settings = {
        "model": "m",
        "prompt": "I am tired.",
        "max_tokens": None,
        "stop": ["fatigué"],
        "include_usage": True,
    }
    pieces = ["Je", " suis", " fatig", "ué", " ce soir."]
    got = events(streamed(settings, pieces))
    texts = [e["choices"][0]["text"] for e in got[:-1]]
    # "fatig" could begin the stop string: it is held back, then dropped.
    assert "".join(texts) == "Je suis"
    assert got[-2]["choices"][0]["finish_reason"] == "stop"
    assert got[-1]["usage"]["completion_tokens"] == 2
    assert not any("fatig" in t for t in texts)


def test_a_token_stream_stops_after_max_tokens_words():
    settings = {
        "model": "m",
        "prompt": "I am tired.",
        "max_tokens": 2,
        "stop": [],
        "include_usage": False,
    }
    got = events(
        streamed(settings, ["Je", " suis", " très", " fatigué."], True)
    )
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in got)
    assert content == "Je suis"
    assert got[-1]["choices"][0]["finish_reason"] == "length"
    free = events(
        streamed({**settings, "max_tokens": None}, ["Je", " suis."], True)
    )
    assert [e["choices"][0]["delta"].get("content") for e in free[1:-1]] == [
        "Je",
        " suis.",
    ]
    assert oe.held_back("Je suis fat", ["fatigué", "x"]) == 3
    assert oe.held_back("Je suis", ["fatigué"]) == 0


def test_a_completion_request_is_read_with_openais_defaults():
    got = oa.parse_request({"model": "translator", "prompt": ["Hi."]}, FIND)
    assert got == {
        "model": "translator",
        "served": SERVED["translator"],
        "prompt": "Hi.",
        "max_tokens": None,
        "stop": [],
        "stream": False,
        "include_usage": False,
        "sampling": None,
        "n": 1,
    }
    chat = oa.parse_request(
        {
            "model": "translator",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
            ],
            "max_completion_tokens": 3,
            "stop": "x",
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
            "seed": 4,
        },
        FIND,
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
            {"model": "translator", "prompt": "Hi.", "temperature": 2.5},
            "temperature",
            400,
        ),
        (
            {"model": "translator", "prompt": "Hi.", "temperature": -1},
            "temperature",
            400,
        ),
        ({"model": "translator", "prompt": "Hi.", "top_p": 0}, "top_p", 400),
        ({"model": "translator", "prompt": "Hi.", "top_p": 1.5}, "top_p", 400),
        ({"model": "translator", "prompt": "Hi.", "top_k": -2}, "top_k", 400),
        ({"model": "translator", "prompt": "Hi.", "top_k": 2.5}, "top_k", 400),
        ({"model": "translator", "prompt": "Hi.", "seed": "1"}, "seed", 400),
        ({"model": "translator", "prompt": "Hi.", "n": 5}, "n", 400),
        ({"model": "translator", "prompt": "Hi.", "n": 0}, "n", 400),
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
    _refused_naming(body, param, status)


def _refused_naming(body, param, status=400, chat=False):
    with pytest.raises(oa.OpenAIError) as info:
        oa.parse_request(body, FIND, chat=chat)
    assert info.value.param == param and info.value.status == status
    assert status == 404 or "Received" in str(info.value)
    error = oa.error_body(info.value)["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("model", [[], {}, ["translator"], 3, None])
def test_a_model_that_is_not_a_string_is_a_400_naming_model(model):
    for chat in (False, True):
        body = {
            "model": model,
            "prompt": "Hi.",
            "messages": [{"role": "user", "content": "Hi."}],
        }
        _refused_naming(body, "model", chat=chat)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text", "text": None},
        {"type": "text", "text": 5},
        {"type": "text", "text": ["Hi."]},
        {"type": "text", "text": {"value": "Hi."}},
        {"type": "text", "text": True},
        {"type": "text"},
        {"type": None, "text": "Hi."},
        {"type": 3},
        "Hi.",
        None,
        ["text", "Hi."],
        7,
        True,
    ],
)
def test_a_content_part_of_the_wrong_type_is_a_400_naming_messages(part):
    body = {
        "model": "translator",
        "messages": [{"role": "user", "content": [part]}],
    }
    with pytest.raises(oa.OpenAIError) as info:
        oa.parse_request(body, FIND, chat=True)
    assert info.value.param == "messages" and info.value.status == 400
    assert "messages[0].content[0]" in str(info.value)


def test_parts_of_other_types_are_left_out():
    body = {
        "model": "translator",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "x"}},
                    {"type": "text", "text": "Hi."},
                ],
            }
        ],
    }
    assert oa.parse_request(body, FIND, chat=True)["prompt"] == "Hi."


@pytest.mark.parametrize(
    "body, param, chat",
    [
        ({"model": "translator", "prompt": "Hi \udc80."}, "prompt", False),
        ({"model": "translator", "prompt": ["\ud800 x"]}, "prompt", False),
        (
            {
                "model": "translator",
                "messages": [{"role": "user", "content": "Hi \udc80."}],
            },
            "messages",
            True,
        ),
        (
            {
                "model": "translator",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "a\udfff"}],
                    }
                ],
            },
            "messages",
            True,
        ),
        (
            {"model": "translator", "prompt": "Hi.", "stop": ["\udc80"]},
            "stop",
            False,
        ),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field(body, param, chat):
    # JSON's \u escapes carry lone surrogates into Python strings.
    body = json.loads(json.dumps(body))
    _refused_naming(body, param, chat=chat)


def test_sampling_is_read_as_openai_and_vllm_send_it():
    def read(**fields):
        body = {"model": "translator", "prompt": "Hi.", **fields}
        return oa.parse_request(body, FIND)

    assert read(temperature=0, top_p=0.5, seed=3)["sampling"] is None
    assert read()["sampling"] is None  # the model's own search
    got = read(temperature=0.7, top_p=0.9, top_k=40, seed=3, n=4)
    assert got["sampling"] == {
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.9,
        "seed": 3,
    }
    assert got["n"] == 4
    assert read(temperature=1, top_k=-1)["sampling"]["top_k"] is None
    assert read(temperature=1, top_k=0)["sampling"]["top_p"] == 1.0


def test_n_choices_in_whole_and_streamed_answers():
    import asyncio

    settings = {
        "model": "lm",
        "prompt": "I am here.",
        "include_usage": True,
        "stop": [],
        "max_tokens": None,
        "n": 2,
    }
    whole = oa.response_choices(
        settings, [("Je suis là.", "stop"), ("Me voici.", "stop")], chat=True
    )
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    assert whole["choices"][1]["message"]["content"] == "Me voici."
    assert whole["usage"]["completion_tokens"] == 5

    async def pieces(*words):
        for word in words:
            yield word

    async def read():
        streams = [pieces("Je", " suis", " là."), pieces("Me", " voici.")]
        return [e async for e in oe.stream_events(settings, streams, True)]

    got = events(asyncio.run(read()))
    texts = {}
    for e in got[:-1]:
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + (
                c["delta"].get("content") or ""
            )
    assert texts == {0: "Je suis là.", 1: "Me voici."}
    assert got[-1]["usage"]["completion_tokens"] == 5
    copies = events(oe.chunks(settings, "Oui.", "stop"))
    assert {c["index"] for e in copies[:-1] for c in e["choices"]} == {0, 1}


@pytest.mark.parametrize(
    "messages, index, role",
    [
        (
            [
                {"role": "system", "content": "Translate."},
                {"role": "user", "content": "Hi."},
            ],
            0,
            "system",
        ),
        (
            [
                {"role": "user", "content": "Hi."},
                {"role": "assistant", "content": "Salut."},
                {"role": "user", "content": "Bye."},
            ],
            0,
            "user",
        ),
    ],
)
def test_a_conversation_the_model_cannot_take_is_refused_naming_it(
    messages, index, role
):
    """A system message or an earlier turn was dropped without a word;
    the model renders no conversation, so it is a 400 naming the
    message."""
    body = {"model": "translator", "messages": messages}
    with pytest.raises(oa.OpenAIError) as err:
        oa.parse_request(body, FIND, chat=True)
    assert f"messages[{index}] with role {role!r}" in str(err.value)
    assert err.value.param == "messages"


def test_a_chat_must_end_with_the_users_message():
    body = {
        "model": "translator",
        "messages": [{"role": "assistant", "content": "x"}],
    }
    with pytest.raises(oa.OpenAIError, match="last message"):
        oa.parse_request(body, FIND, chat=True)


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


def test_usage_counts_the_models_tokens_where_it_has_a_tokenizer():
    class Folder:  # a decoder-only folder's artifact
        def prompt_length(self, text):
            return len(text) + 2  # as if a token a character, and two more

        def count_tokens(self, text):
            return len(text)

    from keras_attn_runtime import capabilities

    counts = oa.token_counts(capabilities.of(Folder()))
    assert oa.usage("I am.", ["Je", "Nous"], counts) == {
        "prompt_tokens": 7,
        "completion_tokens": 6,
        "total_tokens": 13,
    }
    translator = capabilities.of(object())
    assert oa.token_counts(translator) is oa.WORDS  # a translator: words
    settings = {"model": "m", "prompt": "I am.", "n": 1, "counts": counts}
    whole = oa.response(settings, "Je suis", "stop")
    assert whole["usage"]["completion_tokens"] == 7
    streamed = events(
        oe.chunks({**settings, "include_usage": True}, "Je suis", "stop")
    )
    assert streamed[-1]["usage"] == whole["usage"]


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
    stream = list(oe.chunks(settings, text, "stop", chat=True))
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
        oe.chunks({**settings, "include_usage": False}, text, "length")
    )
    assert "".join(e["choices"][0]["text"] for e in plain) == text
    assert plain[-1]["choices"][0]["finish_reason"] == "length"


# --- The server, as OpenAI's client sees it (slow tier). ---


def serving(*names):
    """A `keras-attn serve` of the shipped `names` and OpenAI's client of
    it (its port as `client.port`); stopped when the module is done."""
    pytest.importorskip("kserve")
    openai = pytest.importorskip("openai")
    from tests.serving.live import SHIPPED, start

    if not os.path.isdir(os.path.join(SHIPPED, names[0])):
        pytest.skip(f"no shipped {names[0]}")
    proc, port = start(*names)
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/openai/v1", api_key="-"
    )
    client.port = port
    yield client
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


@pytest.fixture(scope="module")
def client():
    # The seq2seq folder's LiteRT file, which streams (its SavedModel
    # answers by default: `tests/serving/test_one_answer.py`).
    yield from serving("translation_en_fr", "imdb_micro", "--prefer", "litert")


SENTENCES = ["I am tired.", "We will go to the station tomorrow morning."]


def translations(sentences):
    """What `keras-attn translate --stream` answers: the beam of the
    shipped file's streaming signatures, which OpenAI's routes decode
    with."""
    from keras_attn_runtime import LiteRTTranslator
    from tests.serving.live import SHIPPED

    lite = LiteRTTranslator(
        os.path.join(SHIPPED, "translation_en_fr", "model.tflite")
    )
    return ["".join(lite.stream(s)) for s in sentences]


@pytest.mark.slow
def test_completions_answer_as_keras_attn_translate_stream(client):
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


# --- The decoder-only translator: tokens streamed as decided (slow). ---


@pytest.fixture(scope="module")
def lm_client():
    yield from serving("translation_en_fr_lm")


def generated(sentences):
    """What the folder's bundle answers, run by the runtime as the server
    runs it (LiteRT-LM's answers: `tests/runtime/test_generator.py`)."""
    from keras_attn_runtime.generator import BundleGenerator
    from tests.serving.live import SHIPPED

    folder = os.path.join(SHIPPED, "translation_en_fr_lm")
    return BundleGenerator(folder, loops=1).generate(sentences)


@pytest.mark.slow
def test_the_decoder_only_translator_streams_its_tokens_as_decided(lm_client):
    import time

    from keras_attn_runtime.generator import BundleGenerator
    from tests.serving.live import SHIPPED

    want = generated(SENTENCES)
    folder = BundleGenerator(
        os.path.join(SHIPPED, "translation_en_fr_lm"), loops=1
    )
    assert [m.id for m in lm_client.models.list().data] == [
        "translation_en_fr_lm"
    ]
    for sentence, french in zip(SENTENCES, want, strict=True):
        whole = lm_client.completions.create(
            model="translation_en_fr_lm", prompt=sentence
        )
        assert whole.choices[0].text == french
        # Usage in the model's tokens: the prompt as fed, the answer's.
        assert whole.usage.prompt_tokens == folder.prompt_length(sentence)
        assert whole.usage.completion_tokens == folder.count_tokens(french)
        assert folder.count_tokens(french) > len(french.split())
        pieces = []
        for chunk in lm_client.chat.completions.create(
            model="translation_en_fr_lm",
            messages=[{"role": "user", "content": sentence}],
            stream=True,
        ):
            pieces += [c.delta.content or "" for c in chunk.choices]
        assert "".join(pieces) == french
        # One piece a decided token, not one a word of a finished answer.
        assert len([p for p in pieces if p]) >= len(french.split())
    # A client that hangs up after its first piece frees the model: the
    # next answer comes as fast as it would have.
    started = time.perf_counter()
    lm_client.completions.create(model="translation_en_fr_lm", prompt="Hi.")
    alone = time.perf_counter() - started
    stream = lm_client.completions.create(
        model="translation_en_fr_lm", prompt=SENTENCES[1], stream=True
    )
    next(iter(stream))
    stream.close()
    started = time.perf_counter()
    got = lm_client.completions.create(
        model="translation_en_fr_lm", prompt="Hi."
    )
    assert got.choices[0].text
    assert time.perf_counter() - started < alone + 2.0


@pytest.mark.slow
def test_a_seeded_sample_through_openais_client_is_the_same_every_time(
    lm_client,
):
    """OpenAI's client, `stream=True` and a `seed`: the joined stream is
    the unstreamed answer for that seed, and the same again; `n=2` gives
    two choices (seeds 11 and 12); 16 concurrent streams are answered,
    not refused (the default `--max-queue`)."""
    import concurrent.futures

    sentence = "We will go to the station tomorrow morning."
    asked = {
        "model": "translation_en_fr_lm",
        "prompt": sentence,
        "temperature": 1.3,
        "top_p": 0.95,
        "seed": 11,
    }

    def streamed():
        return "".join(
            c.choices[0].text
            for c in lm_client.completions.create(**asked, stream=True)
            if c.choices
        )

    whole = lm_client.completions.create(**asked).choices[0].text
    assert streamed() == whole == streamed()
    two = lm_client.completions.create(**asked, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].text == whole
    again = lm_client.completions.create(**{**asked, "seed": 12})
    assert two.choices[1].text == again.choices[0].text
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: streamed(), range(16)))
    assert answers == [whole] * 16


@pytest.mark.slow
def test_the_curl_example_in_the_docs_streams_the_translation(lm_client):
    # docs/serving.md's streamed curl example, run as written against
    # this server's port: its events join to the folder's answer.
    import shutil
    import subprocess

    from tests.docs_blocks import blocks, with_ports

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    (block,) = [
        b
        for b in blocks(os.path.join("docs", "serving.md"))
        if b.lang == "bash" and '"stream": true' in b.code
    ]
    command = with_ports(block.code, {"8501": str(lm_client.port)})
    done = subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    got = events(done.stdout)
    content = "".join(
        e["choices"][0]["delta"].get("content") or "" for e in got
    )
    assert content == generated(["I am tired."])[0]
    assert done.stdout.rstrip().endswith("data: [DONE]")

"""`keras_attn.models.TextGenerator`: the engine's prompt ids, a folder
that reloads to the same answers, refusals that name the setting."""

import json

import numpy as np
import pytest

from keras_attn.models import CausalLM, TextGenerator
from keras_attn.models import text_generator as module

pytest.importorskip("tokenizers")


def word_tokenizer():
    from keras_attn.translation.tokenizer_json import wordpiece_tokenizer

    words = ["[PAD]", "[UNK]", "[start]", "[end]", "[sep]"]
    words += [f"w{i}" for i in range(5, 30)]
    return wordpiece_tokenizer(words, special_tokens=words[2:5])


def generator(**kwargs):
    lm = CausalLM(
        30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    lm(np.ones((1, 2), "int32"))
    settings = dict(
        start_token="[start]",
        stop_tokens=["[end]"],
        context_length=16,
        prompt_suffix=" [sep]",
    )
    return TextGenerator(lm, word_tokenizer(), **{**settings, **kwargs})


def test_prompt_ids_are_the_engines_start_prompt_and_suffix():
    g = generator(prompt_prefix="w5 ")
    assert g.prompt_ids("w7 w8") == [2, 5, 7, 8, 4]


def test_generation_stops_at_the_context_and_batches_change_nothing():
    g = generator()
    texts = ["w7 w8 w9", "w10", "w11 w12 w13 w14 w15"]
    together = g.generate_ids(texts, batch_size=3)
    alone = [g.generate_ids([t])[0] for t in texts]
    assert len(alone[1]) <= 16 - len(g.prompt_ids("w10"))
    # In a batch a row gets the context less the longest prompt.
    for a, b in zip(together, alone, strict=True):
        assert a == b[: len(a)]


def test_the_folder_reloads_to_the_same_answers(tmp_path):
    g = generator()
    texts = ["w7 w8 w9", "w21 w22"]
    g.save(str(tmp_path))
    assert module.is_text_generator(str(tmp_path))
    loaded = TextGenerator.load(str(tmp_path))
    assert loaded.settings() == g.settings()
    assert loaded.generate(texts) == g.generate(texts)


def test_a_newer_or_foreign_settings_file_is_refused(tmp_path):
    g = generator()
    g.save(str(tmp_path))
    path = tmp_path / module.SETTINGS
    settings = json.loads(path.read_text())
    path.write_text(json.dumps({**settings, "version": 2}))
    with pytest.raises(ValueError, match="version 2"):
        TextGenerator.load(str(tmp_path))
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="settings object"):
        TextGenerator.load(str(tmp_path))


def test_unknown_tokens_and_long_prompts_are_refused_by_name():
    with pytest.raises(ValueError, match="start_token='<s>'"):
        generator(start_token="<s>")
    with pytest.raises(ValueError, match="stop_tokens='</s>'"):
        generator(stop_tokens=["</s>"])
    with pytest.raises(ValueError, match="at most 15 tokens"):
        generator().generate([" ".join(["w7"] * 20)])


def test_streamed_pieces_join_to_the_generated_text():
    import threading

    g = generator()
    for text in ("w7 w8 w9", "w21"):
        pieces = list(g.stream(text))
        assert "".join(pieces) == g.generate([text])[0]
    stop = threading.Event()
    first = []
    for piece in g.stream("w7 w8 w9", stop=stop):
        first.append(piece)
        stop.set()  # a client hung up: nothing more is decoded
    assert len(first) == 1


def test_a_served_folder_refuses_a_prompt_past_its_window_as_the_clients(
    tmp_path,
):
    """The folder's artifact (`keras_attn.loading.opener.TextGeneratorArtifact`)
    refuses a prompt that leaves no room to answer with `PromptTooLong`
    (a 400 when served), before the model runs; the limit is one less
    than the context, as `prompt_ids` counts."""
    from keras_attn.loading.opener import PromptTooLong, TextGeneratorArtifact

    generator().save(str(tmp_path))
    artifact = TextGeneratorArtifact(str(tmp_path))
    fits = " ".join(["w7"] * 13)  # start + 13 + [sep] = 15 ids
    artifact.check_prompt(fits)
    assert len(artifact.generator.prompt_ids(fits)) == 15
    long = " ".join(["w7"] * 14)
    for call in (
        lambda: artifact.check_prompt(long),
        lambda: artifact.run("generate", {"text": [long.encode()]}),
    ):
        with pytest.raises(PromptTooLong) as info:
            call()
        assert (info.value.limit, info.value.received) == (15, 16)


def test_a_sampled_continuation_is_the_same_for_the_same_seed():
    """`stream(..., sampling=Sampling(...))`: the seed decides the text
    (the same seed, the same text; several seeds, several texts, on a
    model with random weights); top_k=1 is greedy; bad settings are
    named."""
    from keras_attn.models import Sampling

    g = generator()
    text = "w7 w8 w9"

    def sampled(**kwargs):
        return "".join(g.stream(text, sampling=Sampling(**kwargs)))

    assert sampled(seed=3, temperature=1.5) == sampled(seed=3, temperature=1.5)
    texts = {sampled(seed=s, temperature=1.5) for s in range(6)}
    assert len(texts) > 1
    assert sampled(seed=4, top_k=1) == g.generate([text])[0]
    assert sampled(seed=5, top_p=1e-6) == g.generate([text])[0]
    for bad, match in (
        ({"temperature": 0}, "temperature=0"),
        ({"top_k": 0}, "top_k=0"),
        ({"top_p": 1.5}, "top_p=1.5"),
        ({"seed": "1"}, "seed='1'"),
    ):
        with pytest.raises(ValueError, match=match):
            Sampling(**bad)


def test_the_served_folder_samples_from_a_settings_dict(tmp_path):
    from keras_attn.loading.opener import TextGeneratorArtifact
    from keras_attn.models import Sampling
    from keras_attn_runtime.opener import streams

    g = generator()
    g.save(str(tmp_path))
    artifact = TextGeneratorArtifact(str(tmp_path))
    assert streams(artifact) and artifact.sampling
    settings = {"temperature": 1.5, "top_k": None, "top_p": 1.0, "seed": 2}
    got = "".join(artifact.stream("w7 w8", sampling=settings))
    assert got == "".join(g.stream("w7 w8", sampling=Sampling(**settings)))

"""`.litertlm` bundles: LiteRT-LM's own engine (its Python API, in a child
process) against Keras's cached greedy search on a tiny decoder with
random weights, token for token; what the engine cannot carry is refused
by name."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_attn.export import export_litertlm
from keras_attn.export import litertlm as litertlm_module
from tests.backend import to_numpy
from tests.tiny_models import (
    CONTEXT,
    END,
    PREFILLS,
    START,
    V,
    tiny_decoder,
    word_tokenizer,
)

pytest.importorskip("litert_lm_builder")
tokenizers = pytest.importorskip("tokenizers")

ENGINE = textwrap.dedent(
    """
    import json, sys
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    bundle, jobs, out = sys.argv[1:]
    engine = litert_lm.Engine(bundle, backend=litert_lm.Backend.CPU())
    greedy = litert_lm.SamplerConfig(top_k=1, top_p=1.0, temperature=1.0)
    answers = []
    for job in json.load(open(jobs)):
        session = engine.create_session(
            apply_prompt_template=False,
            sampler_config=greedy,
            max_output_tokens=job["max_output_tokens"],
        )
        texts = []
        for prompt in job["turns"]:
            session.run_prefill([prompt])
            texts.append(
                "".join(r.texts[0] for r in session.run_decode_async())
            )
        session.close()
        answers.append(texts)
    json.dump(answers, open(out, "w"))
    """
)


def run_engine(bundle, jobs, tmp_path):
    """The engine's answers to `jobs` (`{"turns": [text, ...],
    "max_output_tokens": n}`), from a child process."""
    jobs_path, out_path = tmp_path / "jobs.json", tmp_path / "answers.json"
    jobs_path.write_text(json.dumps(jobs))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            ENGINE,
            str(bundle),
            str(jobs_path),
            str(out_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out_path.read_text())


def keras_answer(lm, tokenizer, ids, max_new):
    """Keras's greedy continuation of `ids` (start token first), as the
    engine's text, and its ids."""
    end = tokenizer.token_to_id(END)
    new = to_numpy(lm.generate(np.array([ids], "int32"), max_new, end))[0]
    kept = [int(i) for i in new if i not in (0, end)]
    # The engine's text keeps special tokens other than the stop token.
    return tokenizer.decode(kept, skip_special_tokens=False), kept


def prompt_of(length, seed):
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.integers(5, V, length)]


def export(lm, path, **kwargs):
    return export_litertlm(
        lm,
        path,
        tokenizer=word_tokenizer(),
        start_token=START,
        stop_tokens=[END],
        context_length=CONTEXT,
        prefill_lengths=PREFILLS,
        **kwargs,
    )


# Prompt lengths: the engine prefills the start token and all but the
# last prompt token, so these prefill 3, 4, 5, 16, 17 and 35 tokens:
# shorter than, equal to and longer than each prefill length, and one
# prompt over three prefill calls.
LENGTHS = (3, 4, 5, 16, 17, 35)


@pytest.mark.slow
def test_the_engine_decodes_as_keras_token_for_token(tmp_path):
    lm = tiny_decoder()
    tokenizer = word_tokenizer()
    bundle = export(lm, str(tmp_path / "lm.litertlm"))
    prompts = [prompt_of(n, seed=n) for n in LENGTHS]
    jobs = [
        {"turns": [tokenizer.decode(p)], "max_output_tokens": None}
        for p in prompts
    ]
    # A second turn in the same session: the first stops after 5 tokens.
    first, second = prompt_of(6, seed=90), prompt_of(4, seed=91)
    jobs.append(
        {
            "turns": [tokenizer.decode(first), tokenizer.decode(second)],
            "max_output_tokens": 5,
        }
    )
    answers = run_engine(bundle, jobs, tmp_path)
    start = tokenizer.token_to_id(START)
    for prompt, (got,) in zip(prompts, answers, strict=False):
        ids = [start, *prompt]
        want, kept = keras_answer(lm, tokenizer, ids, CONTEXT - len(ids))
        assert got == want, (len(prompt), got, want)
        if len(kept) == CONTEXT - len(ids):  # to the end of the context
            assert len(tokenizer.encode(got).ids) == CONTEXT - len(ids)
    reached_end = [
        len(tokenizer.encode(a[0]).ids) + len(p) + 1 == CONTEXT
        for p, a in zip(prompts, answers, strict=False)
    ]
    assert any(reached_end), "no prompt generated to the end of the context"
    assert min(len(set(a[0].split())) for a in answers[:-1]) > 3  # varied
    first_ids = [start, *first]
    want_1, kept_1 = keras_answer(lm, tokenizer, first_ids, 5)
    ids_2 = first_ids + kept_1 + second
    want_2, _ = keras_answer(lm, tokenizer, ids_2, 5)
    assert answers[-1] == [want_1, want_2]


@pytest.mark.slow
def test_a_cache_in_the_wrong_layout_gives_other_tokens(tmp_path, monkeypatch):
    # The comparison above can fail: caches as [1, S, H, D] (the layer's
    # own order) make the engine read the heads as the context length.
    lm = tiny_decoder()
    tokenizer = word_tokenizer()
    monkeypatch.setattr(litertlm_module, "ENGINE_CACHE_AXES", (0, 1, 2, 3))
    bundle = export(lm, str(tmp_path / "wrong.litertlm"))
    prompt = prompt_of(5, seed=5)
    jobs = [{"turns": [tokenizer.decode(prompt)], "max_output_tokens": 12}]
    start = tokenizer.token_to_id(START)
    want, _ = keras_answer(lm, tokenizer, [start, *prompt], 12)
    try:
        got = run_engine(bundle, jobs, tmp_path)[0][0]
    except AssertionError:  # the engine refused the file: also caught
        return
    assert got != want


def test_refusals_name_what_the_engine_cannot_carry(tmp_path):
    from keras_attn.layers import Int8Cache, SinkCache, SlidingWindowCache

    path = str(tmp_path / "x.litertlm")
    with pytest.raises(ValueError, match="decoder-only"):
        export(keras.Sequential([keras.layers.Dense(2)]), path)
    for policy in (SlidingWindowCache(8), SinkCache(2, 8), Int8Cache()):
        lm = tiny_decoder()
        lm.attention_layers[1].cache_policy = policy
        with pytest.raises(
            ValueError, match=f"cache_policy={type(policy).__name__}"
        ):
            export(lm, path)
    lm = tiny_decoder(position="learned", max_length=32)
    with pytest.raises(ValueError, match="max_length=32"):
        export(lm, path)
    lm = tiny_decoder()
    with pytest.raises(ValueError, match="beam search"):
        export(lm, path, sampler="beam")
    with pytest.raises(ValueError, match="prefill_lengths"):
        export_litertlm(
            lm,
            path,
            tokenizer=word_tokenizer(),
            start_token=START,
            stop_tokens=[END],
            context_length=8,
            prefill_lengths=(4, 16),
        )
    with pytest.raises(ValueError, match="stop_tokens='<eos>'"):
        export_litertlm(
            lm,
            path,
            tokenizer=word_tokenizer(),
            start_token=START,
            stop_tokens=["<eos>"],
            context_length=CONTEXT,
        )
    assert not os.listdir(tmp_path)  # nothing written


def test_a_file_that_is_not_a_bundle_is_kept(tmp_path):
    path = tmp_path / "notes.litertlm"
    path.write_text("mine")
    with pytest.raises(ValueError, match="overwrite=True"):
        export(tiny_decoder(), str(path))
    assert path.read_text() == "mine"


def litert_lm_cli():
    found = shutil.which("litert-lm") or os.path.join(
        os.path.dirname(sys.executable), "litert-lm"
    )
    if not os.path.isfile(found):
        pytest.skip("LiteRT-LM's CLI (pip install litert-lm) is not installed")
    return found


@pytest.mark.slow
def test_litert_lm_run_prints_the_text_generators_answer(tmp_path):
    # `litert-lm run --prompt` (the conversation API, the bundle's prompt
    # template) prints what `TextGenerator.generate` gives in Keras.
    from keras_attn.models import TextGenerator

    generator = TextGenerator(
        tiny_decoder(),
        word_tokenizer(),
        START,
        [END],
        CONTEXT,
        prompt_suffix=" [sep]",
    )
    bundle = str(tmp_path / "generator.litertlm")
    generator.export_litertlm(bundle, prefill_lengths=PREFILLS)
    for prompt in ("w7 w8 w9 w10", "w33"):
        done = subprocess.run(
            [litert_lm_cli(), "run", bundle, "--prompt", prompt],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == generator.generate([prompt])[0]


@pytest.mark.slow
def test_a_window_on_the_full_cache_runs_in_the_engine_as_in_keras(tmp_path):
    # Keras's `sliding_window` is a mask over the full cache: the engine
    # runs it as any model, token for token.
    lm = tiny_decoder(sliding_window=6)
    tokenizer = word_tokenizer()
    bundle = export(lm, str(tmp_path / "window.litertlm"))
    prompts = [prompt_of(n, seed=n) for n in (5, 17)]
    jobs = [
        {"turns": [tokenizer.decode(p)], "max_output_tokens": 20}
        for p in prompts
    ]
    start = tokenizer.token_to_id(START)
    answers = run_engine(bundle, jobs, tmp_path)
    for prompt, (got,) in zip(prompts, answers, strict=True):
        want, _ = keras_answer(lm, tokenizer, [start, *prompt], 20)
        assert got == want
    full = tiny_decoder()  # the same weights without the window
    want_full, _ = keras_answer(full, tokenizer, [start, *prompts[1]], 20)
    assert answers[1][0] != want_full  # the window changed the answer


BACKEND_ANSWERS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    import keras_attn  # registers the classes
    path, prompts, end, max_new = sys.argv[1], json.loads(sys.argv[2]), int(
        sys.argv[3]), int(sys.argv[4])
    model = keras.models.load_model(path)
    out = []
    for ids in prompts:
        new = model.generate(np.array([ids], "int32"), max_new, end)
        out.append([int(i) for i in keras.ops.convert_to_numpy(new)[0]])
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_engine_matches_the_model_on_other_backends(tmp_path, backend):
    # The bundle is written through TensorFlow; the same `.keras` model on
    # JAX and PyTorch decodes the engine's tokens.
    pytest.importorskip(backend)
    lm = tiny_decoder()
    tokenizer = word_tokenizer()
    model_path = str(tmp_path / "lm.keras")
    lm.save(model_path)
    bundle = export(lm, str(tmp_path / "lm.litertlm"))
    start, end = tokenizer.token_to_id(START), tokenizer.token_to_id(END)
    prompts = [[start, *prompt_of(n, seed=n)] for n in (4, 17)]
    jobs = [
        {"turns": [tokenizer.decode(p[1:])], "max_output_tokens": 16}
        for p in prompts
    ]
    answers = run_engine(bundle, jobs, tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            BACKEND_ANSWERS,
            model_path,
            json.dumps(prompts),
            str(end),
            "16",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for ids, (got,) in zip(json.loads(done.stdout), answers, strict=True):
        kept = [i for i in ids if i not in (0, end)]
        assert got == tokenizer.decode(kept, skip_special_tokens=False)

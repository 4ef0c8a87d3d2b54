"""A decoder-only folder whose bundle has `decode_rows_<R>` signatures,
served (slow): OpenAI's streamed answers to 7 clients at once equal each
prompt's answer alone, `--max-streams auto` admits them all, and
`usage` counts the model's tokens."""

import json
import threading

import pytest

from tests.tiny_models import CONTEXT, END, PREFILLS, START, V

pytestmark = pytest.mark.slow
pytest.importorskip("litert_lm_builder")
pytest.importorskip("kserve")
httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import os

    import numpy as np

    from keras_attn.models import TextGenerator
    from tests.serving.live import start
    from tests.tiny_models import tiny_decoder, word_tokenizer

    folder = tmp_path_factory.mktemp("served") / "tiny_lm"
    generator = TextGenerator(
        tiny_decoder(), word_tokenizer(), START, [END], CONTEXT
    )
    generator.save(str(folder))
    os.remove(folder / "model.keras")  # served from its bundle
    generator.export_litertlm(
        str(folder / "model.litertlm"), prefill_lengths=PREFILLS
    )
    proc, port = start(str(folder), "--grpc-port", "0")
    rng = np.random.default_rng(0)
    prompts = [
        " ".join(f"w{i}" for i in rng.integers(5, V, n))
        for n in (1, 3, 6, 12, 20, 30, 40)
    ]
    yield f"http://127.0.0.1:{port}/openai/v1", prompts, str(folder)
    proc.terminate()
    proc.wait(30)


def _streamed(base, prompt):
    body = {
        "model": "tiny_lm",
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    pieces, usage = [], None
    with httpx.Client(timeout=120) as http:
        with http.stream("POST", f"{base}/chat/completions", json=body) as got:
            assert got.status_code == 200, got.read()
            for line in got.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                for choice in event["choices"]:
                    pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces), usage


def test_seven_clients_at_once_get_their_answers_alone(server):
    from keras_attn_runtime.generator import BundleGenerator

    base, prompts, folder = server
    alone = [_streamed(base, p) for p in prompts]
    got = [None] * len(prompts)
    ready = threading.Barrier(len(prompts))

    def client(i):
        ready.wait()
        got[i] = _streamed(base, prompts[i])

    threads = [
        threading.Thread(target=client, args=(i,)) for i in range(len(prompts))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone
    local = BundleGenerator(folder, loops=1)
    for prompt, (text, usage) in zip(prompts, alone, strict=True):
        assert text == "".join(local.stream(prompt))
        assert usage["prompt_tokens"] == local.prompt_length(prompt)
        assert usage["completion_tokens"] == local.count_tokens(text)

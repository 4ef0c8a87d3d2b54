"""`TextGenerator`: a decoder-only model, its tokenizer and its prompt
format, as one folder that Keras and LiteRT-LM read alike.

The folder (format `keras_attn.text_generator`, version 1):

- `model.keras`: the model (e.g. `keras_attn.models.CausalLM`);
- `tokenizer.json`: its Hugging Face `tokenizers` tokenizer;
- `generation.json`: the format, its version, the start and stop tokens,
  the text around a prompt and the context length;
- `model.litertlm` (optional, `export_litertlm`): the bundle LiteRT-LM
  runs, written from the same settings, so both answer a prompt alike.
"""

import json
import os

from keras_attn_runtime import generator as folder_format
from keras_attn_runtime.generator import (  # noqa: F401 (the format's names)
    BUNDLE,
    FORMAT,
    SETTINGS,
    TOKENIZER,
    VERSION,
)

MODEL = "model.keras"


def is_text_generator(folder):
    """Whether `folder` holds a `TextGenerator`'s files."""
    return all(
        os.path.isfile(os.path.join(folder, name))
        for name in (SETTINGS, MODEL, TOKENIZER)
    )


def greedy_pick(logits):
    """The most likely token of `logits` `(1, V)`."""
    from keras import ops

    return int(ops.convert_to_numpy(ops.argmax(logits[0])))


class Sampling:
    """How a continuation is sampled instead of decoded greedily
    (OpenAI's `temperature`, `top_p` and `seed`, and vLLM's `top_k`).

    Args:
        temperature: divides the logits; positive. Defaults to `1.0`.
        top_k: keep the `top_k` most likely tokens; `None` keeps all.
            Defaults to `None`.
        top_p: keep the nucleus of probability `top_p` in `(0, 1]`.
            Defaults to `1.0`.
        seed: the seed of NumPy's generator of the uniform numbers;
            `None` draws fresh entropy. Defaults to `None`.
    """

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None):
        from keras_attn_runtime import sampling

        settings = sampling.read(
            {"temperature": temperature, "top_k": top_k, "top_p": top_p}
            | {"seed": seed}
        )
        self.temperature, self.top_k = settings["temperature"], top_k
        self.top_p, self.seed = settings["top_p"], seed

    def picker(self):
        """`pick(logits (1, V)) -> token`: one draw a call, from a
        generator started at `seed` (a new continuation, a new picker)."""
        import numpy as np
        from keras import ops

        from keras_attn.seq2seq.samplers.random import (
            inverse_cdf,
            nucleus,
            top_k_cut,
        )

        rng = np.random.default_rng(self.seed)

        def pick(logits):
            logits = ops.cast(logits, "float32") / self.temperature
            if self.top_k is not None:
                logits = top_k_cut(logits, self.top_k)
            if self.top_p < 1:
                logits = nucleus(logits, self.top_p)
            u = ops.convert_to_tensor(rng.random(1, dtype="float32"))
            return int(ops.convert_to_numpy(inverse_cdf(logits, u))[0])

        return pick


class TextGenerator:
    """Prompts in, continuations out, as LiteRT-LM's engine makes them:
    the start token, the prompt between `prompt_prefix` and
    `prompt_suffix`, then greedy tokens until a stop token or the end of
    the context.

    Args:
        model: a decoder-only model with `generate(token_ids,
            max_new_tokens, end_token_id)` (`keras_attn.models.CausalLM`).
        tokenizer: a `tokenizers.Tokenizer`.
        start_token: the token before every prompt.
        stop_tokens: tokens that end a continuation.
        context_length: prompt and continuation, in tokens.
        prompt_prefix: text before each prompt.
        prompt_suffix: text after each prompt (e.g. `" [sep]"` after a
            sentence to translate).
    """

    def __init__(
        self,
        model,
        tokenizer,
        start_token,
        stop_tokens,
        context_length,
        prompt_prefix="",
        prompt_suffix="",
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.start_token = start_token
        self.stop_tokens = list(stop_tokens)
        self.context_length = context_length
        self.prompt_prefix = prompt_prefix
        self.prompt_suffix = prompt_suffix
        for name, token in [("start_token", start_token)] + [
            ("stop_tokens", t) for t in self.stop_tokens
        ]:
            if tokenizer.token_to_id(token) is None:
                raise ValueError(
                    f"Expected {name} to be a token of the tokenizer. "
                    f"Received: {name}={token!r}"
                )

    def settings(self):
        return {
            "start_token": self.start_token,
            "stop_tokens": self.stop_tokens,
            "context_length": self.context_length,
            "prompt_prefix": self.prompt_prefix,
            "prompt_suffix": self.prompt_suffix,
        }

    def prompt_ids(self, text, check=True):
        """The ids the engine feeds for `text`: start token, then the
        prompt with its prefix and suffix (a `PromptTooLong`, a
        `ValueError`, when they leave no room in the context, unless
        `check=False`)."""
        ids = folder_format.prompt_ids(
            self.tokenizer,
            self.tokenizer.token_to_id(self.start_token),
            self.prompt_prefix,
            self.prompt_suffix,
            text,
        )
        if check:  # the runtime's rule, for the bundle and this model
            folder_format.check_context(len(ids), self.context_length)
        return ids

    def generate_ids(self, texts, batch_size=64):
        """The continuation's ids of each text (stop token left out).
        Texts run `batch_size` at a time, left-padded: a row gets at most
        `context_length` minus its batch's longest prompt."""
        import numpy as np
        from keras import ops

        stops = [self.tokenizer.token_to_id(t) for t in self.stop_tokens]
        prompts = [self.prompt_ids(t) for t in texts]
        out = []
        for k in range(0, len(prompts), batch_size):
            chunk = prompts[k : k + batch_size]
            width = max(len(p) for p in chunk)
            batch = np.zeros((len(chunk), width), "int32")
            for row, p in zip(batch, chunk, strict=True):
                row[width - len(p) :] = p
            new = self.model.generate(batch, self.context_length - width, stops)
            for row in ops.convert_to_numpy(new):
                out.append([int(i) for i in row if i and i not in stops])
        return out

    def generate(self, texts, batch_size=64):
        """The continuation of each text, as text (special tokens kept,
        as the engine keeps them)."""
        return [
            self.tokenizer.decode(ids, skip_special_tokens=False)
            for ids in self.generate_ids(texts, batch_size)
        ]

    def stream(self, text, stop=None, sampling=None):
        """The continuation of `text` in pieces, as tokens are decided:
        each piece is what the text decoded so far adds (special tokens
        kept, as the engine keeps them). `stop`: a `threading.Event`
        (or anything with `is_set`) that ends the loop between tokens,
        e.g. when a client hangs up. `sampling`: `None` (greedy, as the
        engine decodes), or a `Sampling`: each token drawn from
        `softmax(logits / temperature)` cut to the `top_k` most likely
        and to the `top_p` nucleus (`keras_attn.seq2seq.samplers`'
        `top_k_cut`, `nucleus` and `inverse_cdf`), the uniform numbers
        from NumPy's generator at `seed`: the same seed gives the same
        text."""
        return folder_format.text_pieces(
            self.tokenizer, self._token_ids(text, stop, sampling)
        )

    def _token_ids(self, text, stop, sampling):
        """Yield the continuation's ids one at a time (a stop token ends
        it, left out), until the context is full or `stop` is set."""
        from keras import ops

        pick = greedy_pick if sampling is None else sampling.picker()
        ids = self.prompt_ids(text)
        stops = {self.tokenizer.token_to_id(t) for t in self.stop_tokens}
        cache = self.model.empty_cache(1, self.context_length)
        prompt = ops.convert_to_tensor([ids], "int32")
        _, cache = self.model.call_with_cache(prompt[:, :-1], cache, 0)
        token, position = ids[-1], len(ids) - 1
        while position < self.context_length - 1:
            if stop is not None and stop.is_set():
                return
            logits, cache = self.model.call_with_cache(
                ops.convert_to_tensor([[token]], "int32"), cache, position
            )
            token = pick(logits[:, -1])
            position += 1
            if token in stops:
                return
            yield token

    def export_litertlm(self, path, **kwargs):
        """`keras_attn.export.export_litertlm` of the model with this
        generator's tokenizer and settings; `kwargs`: its other
        arguments (`prefill_lengths`, `quantize`, `overwrite`, ...)."""
        from keras_attn.export.litertlm import export_litertlm

        return export_litertlm(
            self.model,
            path,
            tokenizer=self.tokenizer,
            **self.settings(),
            **kwargs,
        )

    def save(self, folder):
        """Write `model.keras`, `tokenizer.json` and `generation.json`
        into `folder` (created if needed)."""
        os.makedirs(folder, exist_ok=True)
        self.model.save(os.path.join(folder, MODEL))
        self.tokenizer.save(os.path.join(folder, TOKENIZER))
        settings = {"format": FORMAT, "version": VERSION, **self.settings()}
        with open(os.path.join(folder, SETTINGS), "w", encoding="utf-8") as f:
            json.dump(settings, f, indent=2, ensure_ascii=False)

    @classmethod
    def load(cls, folder):
        """The `TextGenerator` that `save` wrote into `folder`."""
        # Importing this module ran `keras_attn/__init__`, which registers
        # the model classes `load_model` needs.
        import keras
        from tokenizers import Tokenizer

        settings = folder_format.read_settings(folder)
        model = keras.models.load_model(os.path.join(folder, MODEL))
        tokenizer = Tokenizer.from_file(os.path.join(folder, TOKENIZER))
        return cls(model, tokenizer, **settings)

"""What an opened artifact can do, read in one place.

An artifact declares what it offers by the attributes of
`keras_attn_runtime.opener.StreamingArtifact` (and, for token counts,
`prompt_length`/`count_tokens`). `of(artifact)` reads them once, when the
artifact is opened for serving; the serving plane and every protocol
then ask the `Capabilities` it returns, never the artifact.
"""

import dataclasses
from collections.abc import Callable

# How an artifact's streams are decoded, as the server drives them:
# - "turns": one at a time on the model's executor (one model call at a
#   time, as every other request's);
# - "loops": every caller's text in the artifact's shared loops, each
#   stream read by a thread of its own that waits;
# - "handover": the artifact's own threads hand each piece to a callback
#   (`stream_into`), and the server gives a stream no thread.
DECODING = ("turns", "loops", "handover")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What one artifact offers the server.

    Args:
        streams: it decodes its answer piece by piece (`stream`).
        decoding: how those pieces are produced (one of `DECODING`).
        samples: `stream` takes `sampling=` (temperature, top-k, top-p,
            seed); else it answers with its own deterministic search.
        capacity: the texts its loops hold at once, or `None` when it
            does not say.
        window: `check(text)`, raising a `PromptTooLong` for a text past
            the model's window, or `None` for a model without one.
        counts: `(prompt_tokens(text), answer_tokens(text))` by the
            model's tokenizer, or `None` where it has none.
    """

    streams: bool = False
    decoding: str = "turns"
    samples: bool = False
    capacity: int | None = None
    window: Callable | None = None
    counts: tuple | None = None


def of(artifact):
    """The `Capabilities` `artifact` declares."""
    from keras_attn_runtime.opener import streams

    window = getattr(artifact, "check_prompt", None)
    prompt = getattr(artifact, "prompt_length", None)
    answer = getattr(artifact, "count_tokens", None)
    counts = (prompt, answer) if callable(prompt) and callable(answer) else None
    if not streams(artifact):
        return Capabilities(window=window, counts=counts)
    if callable(getattr(artifact, "stream_into", None)):
        decoding = "handover"
    elif artifact.concurrent_streams:
        decoding = "loops"
    else:
        decoding = "turns"
    return Capabilities(
        streams=True,
        decoding=decoding,
        samples=bool(artifact.sampling),
        capacity=artifact.stream_capacity,
        window=window,
        counts=counts,
    )

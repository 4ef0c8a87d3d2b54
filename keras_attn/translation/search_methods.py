"""The searches a `Translator` runs, in the graph and in a LiteRT file:
the samplers that read the decoder's logits alone, and their names."""

from keras_attn.seq2seq import samplers


def sampler_name(sampler):
    """The name `samplers.get` knows `sampler`'s class by (else the
    class name)."""
    names = {cls: name for name, cls in samplers.NAMES.items()}
    return names.get(type(sampler), type(sampler).__name__)


def token_sampler(sampler, argument):
    """`sampler`, if a translator can run it: one that reads the decoder's
    logits alone (not contrastive search, which needs the decoder's
    representation, nor multi-label decoding)."""
    if isinstance(
        sampler, (samplers.ContrastiveSampler, samplers.MultiLabelSampler)
    ):
        raise ValueError(
            f"A Translator runs greedy, random, top-k, top-p or beam "
            f"search. Received: {argument}={sampler!r}"
        )
    return sampler


def litert_sampler(translator, search_method):
    """The sampler `Translator.export_tflite(search_method=...)` runs."""
    if search_method == "beam":
        if not isinstance(translator.sampler, samplers.BeamSampler):
            raise ValueError(
                "search_method='beam' exports the translator's beam "
                f"search; its sampler is {translator.sampler!r}. Pass that "
                "sampler, or a BeamSampler, as search_method instead. "
                f"Received: search_method={search_method!r}"
            )
        return translator.sampler
    try:
        sampler = samplers.get(search_method)
    except ValueError:
        raise ValueError(
            "Expected search_method to be 'greedy', 'beam' or a sampler "
            f"(samplers.get). Received: search_method={search_method!r}"
        ) from None
    return token_sampler(sampler, "search_method")


def streaming_search(translator):
    """The search settings a streaming translator file carries: the
    translator's greedy or beam search (`keras_attn_runtime.search` runs
    them with `BeamSampler`'s default ranking)."""
    sampler = translator.sampler
    if isinstance(sampler, samplers.GreedySampler):
        return {"search": "greedy"}
    config = (
        sampler.get_config()
        if isinstance(sampler, samplers.BeamSampler)
        else None
    )
    if (
        config is None
        or config["count_end_token"] is not True
        or config["coverage_on_finished_only"]
    ):
        raise ValueError(
            "A streaming translator file runs greedy search or a "
            "BeamSampler ranking as GNMT does (count_end_token=True, "
            "coverage_on_finished_only=False). Received: the translator's "
            f"sampler={sampler!r}"
        )
    keys = ("beam_width", "length_penalty", "coverage_penalty")
    return {"search": "beam", **{k: config[k] for k in keys}}

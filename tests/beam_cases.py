"""Texts for the Beam tests and a pipeline that runs them
(`run`: RunInference on DirectRunner, read back exactly)."""

import os

import numpy as np

REVIEWS = [
    f"{start} film, {middle} and {end}."
    for start in ("A wonderful", "A dull", "An odd", "The worst")
    for middle in ("moving", "far too long", "well acted")
    for end in ("funny", "boring", "forgettable")
]  # 36 texts
SENTENCES = [
    "I am tired.",
    "Where is the station?",
    "She is reading a book.",
    "We have to leave now.",
    "The cat is sleeping on the chair.",
    "He will come back tomorrow morning.",
]


def run(handler, texts, workers=1):
    """`{text: inference}` of `texts` through RunInference on
    DirectRunner (`workers` > 1: that many processes), read back from
    the files the pipeline writes (JSON lines: the exact floats; an
    attention map as float32)."""
    import glob
    import json
    import tempfile

    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.options.pipeline_options import PipelineOptions

    options = ["--direct_num_workers", str(workers)]
    if workers > 1:
        options += ["--direct_running_mode", "multi_processing"]

    def line(result):
        value = result.inference
        if isinstance(value, dict):
            value = {k: np.asarray(v).tolist() for k, v in value.items()}
        return json.dumps([result.example, value])

    with tempfile.TemporaryDirectory() as folder:
        with beam.Pipeline(options=PipelineOptions(options)) as p:
            _ = (
                p
                | beam.Create(texts, reshuffle=True)
                | RunInference(handler)
                | beam.Map(line)
                | beam.io.WriteToText(os.path.join(folder, "out"))
            )
        got = {}
        for path in glob.glob(os.path.join(folder, "out*")):
            with open(path, encoding="utf-8") as f:
                for text, value in map(json.loads, f):
                    if isinstance(value, dict):
                        value["attention"] = np.asarray(
                            value["attention"], "float32"
                        )
                    got[text] = value
    return got

"""
Title: Classifying and translating a whole corpus with Apache Beam
Author: keras_attn contributors
Description: The shipped models in Apache Beam's RunInference: the IMDB
test split classified and the held-out English sentences translated on
DirectRunner here, and on Dataflow, Flink or Spark by changing only the
pipeline options.

Run it on this machine, two worker processes:

    python recipes/beam_inference.py --task classify --output out/reviews \\
        --direct_num_workers 2 --direct_running_mode multi_processing
    python recipes/beam_inference.py --task translate --handler saved_model \\
        --output out/french \\
        --direct_num_workers 2 --direct_running_mode multi_processing

Every flag this script does not know is Beam's (docs/batch_inference.md has
those of Dataflow, Flink and Spark).
"""

"""
## Introduction

`keras-attn predict --file` and `translate --file` run one process on one
machine. For millions of texts, TensorFlow users reach for Apache Beam's
`RunInference`, the TFX path: Beam cuts the input into bundles, batches
each bundle's elements, and runs a model on every worker. keras_attn has
a `ModelHandler` for each of its models:

- `keras_attn_runtime.beam`: `LiteRTClassifierHandler` and
  `LiteRTTranslatorHandler`; a worker needs NumPy and LiteRT only.
- `keras_attn.beam`: `SavedModelClassifierHandler` and
  `SavedModelTranslatorHandler`; a worker needs TensorFlow.

A handler holds a path and its settings; the model is built on the
worker, in `load_model`. Beam's own `TFModelHandlerTensor` cannot load
these SavedModels (it asks for tensorflow-hub, then loads with
`tf.keras.models.load_model`, which Keras 3 refuses).
"""

import argparse
import glob
import json
import os
import sys

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import PipelineOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "saved_models")
MODELS = {  # (task, handler): the shipped model it reads
    ("classify", "litert"): "imdb_edge/model_full_int8.tflite",
    ("classify", "saved_model"): "imdb_ssa",
    ("translate", "litert"): "translation_en_fr/model.tflite",
    ("translate", "saved_model"): "translation_en_fr",
}

"""
## Load the texts

The classifier reads the IMDB test split through TensorFlow Datasets
(`$TFDS_DATA_DIR` points at the local copy); the translator reads the
English side of the held-out Tatoeba pairs, the 3,179 sentences its BLEU
is measured on (the translation recipe's split: 10%, seed 1337). `--input`
reads one text a line instead.
"""


def imdb_test_reviews():
    import tensorflow_datasets as tfds

    split = tfds.load("imdb_reviews", split="test", as_supervised=True)
    return [text.decode("utf-8") for text, _ in tfds.as_numpy(split)]


def held_out_sentences():
    from keras_attn.translation.data import read_pairs, split_by_source

    pairs = os.path.join(
        ROOT, "..", "shared", "data", "translation", "pairs.tsv"
    )
    _, held = split_by_source(read_pairs(pairs), 0.1, 1337)
    return sorted({source for source, _ in held})


def read_input(args):
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    return (
        imdb_test_reviews() if args.task == "classify" else held_out_sentences()
    )


"""
## The handler

`bucket_by_length` batches sentences of similar length together, for the
SavedModel translator, whose batch is padded to its longest sentence
(Beam buckets only when a batch duration is set; the handler sets one).
The LiteRT readers run a text at a time, so their batches only save the
per-call overhead.
"""


def make_handler(args):
    path = args.model or os.path.join(SHIPPED, MODELS[args.task, args.handler])
    if args.handler == "litert":
        from keras_attn_runtime import beam as handlers

        kind = (
            "LiteRTClassifierHandler"
            if args.task == "classify"
            else ("LiteRTTranslatorHandler")
        )
        return getattr(handlers, kind)(path)
    from keras_attn import beam as handlers

    if args.task == "classify":
        return handlers.SavedModelClassifierHandler(path)
    return handlers.SavedModelTranslatorHandler(path, bucket_by_length=True)


"""
## The pipeline

Texts in, one JSON line each out: the text and its probability, or its
translation. `reshuffle=True` spreads the input over the workers
(without it DirectRunner gives every element to one worker).
"""


def as_line(result):
    return json.dumps(
        {"text": result.example, "answer": result.inference}, ensure_ascii=False
    )


def run_pipeline(texts, handler, output, beam_args):
    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        _ = (
            pipeline
            | "Texts" >> beam.Create(texts, reshuffle=True)
            | "Model" >> RunInference(handler)
            | "JSON" >> beam.Map(as_line)
            | "Write" >> beam.io.WriteToText(output, file_name_suffix=".jsonl")
        )


"""
## Check against the direct call

The same handler's model, loaded here, on a sample of the texts one at a
time: Beam's answers must be the same (a translation the same string; a
LiteRT probability the same float; a SavedModel's within 1e-6, the
batched matmul's reordering).
"""


def read_answers(output):
    answers = {}
    for path in glob.glob(output + "*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                answers[row["text"]] = row["answer"]
    return answers


def check(texts, handler, answers, count):
    model = handler.load_model()
    step = max(1, len(texts) // count)
    sample = texts[::step][:count]
    for text in sample:
        (want,) = handler.predict(model, [text])
        got = answers[text]
        same = got == want if isinstance(want, str) else abs(got - want) <= 1e-6
        if not same:
            raise SystemExit(
                f"different answer for {text[:60]!r}: {got!r} != {want!r}"
            )
    return len(sample)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    parser.add_argument(
        "--task", choices=("classify", "translate"), required=True
    )
    parser.add_argument(
        "--handler", choices=("litert", "saved_model"), default="litert"
    )
    parser.add_argument(
        "--model", default=None, help="default: the shipped one"
    )
    parser.add_argument("--input", default=None, help="one text a line")
    parser.add_argument(
        "--output",
        required=True,
        help="where the answers go: PREFIX-*-of-*.jsonl (nothing there yet)",
    )
    parser.add_argument(
        "--check", type=int, default=200, help="answers checked"
    )
    args, beam_args = parser.parse_known_args(argv)
    earlier = sorted(glob.glob(glob.escape(args.output) + "*"))
    if earlier:  # never replaced, never read as this run's answers
        parser.error(
            "Expected --output to name a prefix no file has yet. Received: "
            f"--output={args.output!r}, with {earlier[:3]} already there"
        )
    texts = read_input(args)
    handler = make_handler(args)
    run_pipeline(texts, handler, args.output, beam_args)
    answers = read_answers(args.output)
    if len(answers) != len(set(texts)):
        raise SystemExit(f"{len(answers)} answers for {len(set(texts))} texts")
    checked = check(texts, handler, answers, args.check)
    print(f"{len(answers)} answers in {args.output}*.jsonl; {checked} checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())

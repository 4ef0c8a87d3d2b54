"""The teacher's translations for `translation_lm.py`: the shipped GRU
ensemble (`saved_models/translation_en_fr`, its LiteRT file, beam search)
translates every training source once, and the decoder-only student learns
from those translations (sequence-level knowledge distillation; Kim &
Rush 2016). The file is written once and reused: `runs/lm_teacher.tsv`,
`source<TAB>translation`, one line a distinct training source.

Run alone: `python recipes/translation_lm_teacher.py` (two worker
processes, about 6 minutes on two CPU cores).
"""

import argparse
import multiprocessing
import os

import translation

from keras_attn.translation.data import read_pairs, split_by_source

TEACHER = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    *"../saved_models/translation_en_fr/model.tflite".split("/"),
)
DEFAULT_OUT = os.path.join("runs", "lm_teacher.tsv")


def _translate_chunk(job):
    from keras_attn_runtime import LiteRTTranslator

    teacher, sources = job
    # XNNPACK: the fastest kernels; these translations are data, written
    # once, so their last-bit determinism does not matter.
    lite = LiteRTTranslator(teacher, cpu_kernels="xnnpack")
    return [lite.translate(s) for s in sources]


def teacher_translations(
    sources, teacher=TEACHER, out=DEFAULT_OUT, workers=2, verbose=True
):
    """`{source: translation}` of the teacher for `sources`, read from
    `out` when it holds them all, else computed and written there."""
    known = {}
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            for line in f:
                source, _, target = line.rstrip("\n").partition("\t")
                known[source] = target
    missing = sorted(set(sources) - set(known))
    if missing:
        if verbose:
            print(f"Teacher: translating {len(missing)} sources ...")
        chunks = [missing[i :: workers * 8] for i in range(workers * 8)]
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            done = pool.map(_translate_chunk, [(teacher, c) for c in chunks])
        for chunk, translated in zip(chunks, done, strict=True):
            known.update(zip(chunk, translated, strict=True))
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        tmp = out + ".partial"
        with open(tmp, "w", encoding="utf-8") as f:
            for source in sorted(known):
                f.write(f"{source}\t{known[source]}\n")
        os.replace(tmp, out)
    return {s: known[s] for s in sources}


def main(pairs=translation.DEFAULT_PAIRS, out=DEFAULT_OUT, workers=2):
    hp = translation.HPARAMS
    train, _ = split_by_source(
        read_pairs(pairs), hp["val_fraction"], hp["seed"]
    )
    teacher_translations(
        sorted({s for s, _ in train}), out=out, workers=workers
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", default=translation.DEFAULT_PAIRS)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=2)
    main(**vars(parser.parse_args()))

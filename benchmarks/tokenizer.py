"""Time and memory of the numpy-only LiteRT tokenizer on hostile input.

`python -m benchmarks.tokenizer [--sizes 1 50] [--old]` writes
`benchmarks/results/tokenizer.json`: for each input kind and size (in
millions of characters), the seconds to tokenize one text for a
500-token model, for a model with no length limit (`standardize`, the
whole text), and the peak memory the tokenizer allocates beyond the input
(`tracemalloc`, a separate call). `--old` adds the 0.1 regex tokenizer at
0.2M characters.
"""

import argparse
import json
import os
import subprocess
import sys

KINDS = {
    "review": "A <b>great</b> film, don't miss it!! 10/10 'quoted' caf\u00e9 ",
    "'<' only": "<",
    "quotes": "'",
    "word'": "a'",
    "emoji": "\U0001f600 ",
    "spaces": " ",
}

CASE = """
import json, sys, time
sys.modules["tensorflow"] = None
sys.modules["keras"] = None
import keras_attn_runtime.text as rt
unit, n = json.loads(sys.argv[1]), int(sys.argv[2])
text = (unit * (n // len(unit) + 1))[:n]
tok = rt.Tokenizer(["", "[UNK]", "great", "film"], 500)
t0 = time.perf_counter(); tok([text]); t1 = time.perf_counter()
rt.standardize(text); t2 = time.perf_counter()
import tracemalloc
tracemalloc.start(); tok([text]); peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps([t1 - t0, t2 - t1, peak / 2**20]))
"""

OLD = """
import re, sys, time
_T = re.compile(r"<[^>]*>"); _M = re.compile(r"([!?])")
_O = re.compile(r"[^a-z0-9!?' ]"); _Q = re.compile(r"(^|\\s)'+|'+(\\s|$)")
def std(t):
    t = "".join(c.lower() if c < "\\x80" else c for c in t)
    return _Q.sub(" ", _O.sub(" ", _M.sub(r" \\1 ", _T.sub(" ", t))))
text = {"<": "<" * 200_000, "x'...'x": "x" + "'" * 200_000 + "x"}[sys.argv[1]]
t0 = time.perf_counter(); std(text); print(time.perf_counter() - t0)
"""


def main(argv=None):
    from benchmarks import results

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 50])
    parser.add_argument("--old", action="store_true")
    parser.add_argument(
        "--out", default=os.path.join(results.RESULTS, "tokenizer.json")
    )
    args = parser.parse_args(argv)
    rows, old = [], {}
    for name, unit in KINDS.items():
        for size in args.sizes:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CASE,
                    json.dumps(unit),
                    str(int(size * 1e6)),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            t_tok, t_std, mem = json.loads(proc.stdout)
            rows.append(
                {
                    "input": name,
                    "m_chars": size,
                    "tokens_500_s": t_tok,
                    "standardize_all_s": t_std,
                    "peak_mib": mem,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    if args.old:
        for unit in ("<", "x'...'x"):
            proc = subprocess.run(
                [sys.executable, "-c", OLD, unit],
                capture_output=True,
                text=True,
                check=True,
            )
            old[unit] = float(proc.stdout)
            print(f"0.1 tokenizer, {unit!r} (200,000 characters): {old[unit]}")
    import numpy

    record = results.meta("tokenizer", argv or sys.argv[1:])
    record["numpy"] = numpy.__version__
    print("wrote", results.save(args.out, record, rows, old_tokenizer_s=old))


if __name__ == "__main__":
    main()

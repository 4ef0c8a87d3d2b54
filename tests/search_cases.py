"""Decoders and references for the search tests: a decoder whose next
token depends only on the one before (`chain`), every hypothesis of such
a decoder with its log-probability (`enumerate_hypotheses`), GNMT's
length and coverage score written from the paper (`gnmt_score`)."""

import itertools

import numpy as np
from keras import ops

PAD, START, END = 0, 1, 2


def chain(logits, attention=None):
    """A decoder whose next-token logits depend only on the previous token.

    `attention (V, S)`, if given, is the alignment emitted after each
    previous token. The state counts the steps taken.
    """

    def step_fn(tokens, state, index):
        out = ops.take(ops.convert_to_tensor(logits), tokens, axis=0)
        align = None
        if attention is not None:
            align = ops.take(ops.convert_to_tensor(attention), tokens, axis=0)
        return out, state + 1.0, align

    return step_fn


def enumerate_hypotheses(logits, max_len, allowed):
    """Every token list ending once at END, or cut at max_len, with its
    log-probability under softmax over the allowed columns."""
    logp = logits[:, allowed] - np.log(
        np.exp(logits[:, allowed]).sum(1, keepdims=True)
    )
    col = {tok: j for j, tok in enumerate(allowed)}
    for n in range(1, max_len + 1):
        for seq in itertools.product(allowed, repeat=n):
            if END in seq[:-1] or (n < max_len and seq[-1] != END):
                continue
            prev, total = START, 0.0
            for tok in seq:
                total += logp[prev, col[tok]]
                prev = tok
            yield seq, total


def gnmt_score(seq, total, alpha, beta=0.0, attention=None, mask=None):
    score = total / ((5.0 + len(seq)) / 6.0) ** alpha
    if beta:
        prevs = (START, *seq[:-1])
        cov = sum(attention[p] for p in prevs)
        logs = np.log(np.clip(cov, 1e-10, 1.0))
        if mask is not None:
            logs = np.where(mask, logs, 0.0)
        score += beta * logs.sum()
    return score


def strip(ids):
    return [int(t) for t in np.asarray(ops.convert_to_numpy(ids)) if t != 0]

"""Calibrate the latency rule on recorded GPU noise (pure: no I/O).

Input: one case measured in many rounds (lists of per-call times), as
lab/noise_study.py records on a GPU. A simulated gate trial draws a base
round and a head round (round-to-round differences stand in for run-to-run
drift: clocks, temperature, other tenants), resamples each with replacement,
slows the head by the injected factor, and applies the rule. A flagged trial
is then confirmed the way the gate confirms: other rounds, split alternately
into base and head (the interleaved re-measure), pooled and tested again.
"""

import numpy as np

from mlagate.decide.verdict import is_slower


def _draw(rng, rounds, index, factor=1.0, size=None):
    x = np.asarray(rounds[index], dtype=float)
    return rng.choice(x, size=size or len(x), replace=True) * factor


def trial(rng, rounds, slowdown, *, screen, threshold, alpha, confirm_rounds, confirm_share) -> tuple:
    """(screened, failed) for one simulated gate run with an injected slowdown;
    ``confirm_rounds`` rounds per side in the re-measure, each ``confirm_share`` of a
    recorded round's samples (perf.yml: the confirm budget's windows over the record's)."""
    order = rng.permutation(len(rounds))
    base_i, head_i, rest = order[0], order[1], order[2:]
    factor = 1 + slowdown
    screened = is_slower(_draw(rng, rounds, base_i), _draw(rng, rounds, head_i, factor), screen, alpha)
    if not screened:
        return False, False
    pairs = rest[: 2 * confirm_rounds]
    def size(i):
        return max(5, round(len(rounds[i]) * confirm_share))

    base = np.concatenate([_draw(rng, rounds, i, size=size(i)) for i in pairs[0::2]])
    head = np.concatenate([_draw(rng, rounds, i, factor, size=size(i)) for i in pairs[1::2]])
    return True, is_slower(base, head, threshold, alpha)


def detection_curve(rounds, slowdowns, *, screen, threshold, alpha, confirm_rounds, confirm_share, trials=400,
                    seed=0) -> list:
    """[(slowdown, share screened, share failed after confirmation)] per injected slowdown."""
    if len(rounds) < 2 + 2 * confirm_rounds:
        raise ValueError(f"need at least {2 + 2 * confirm_rounds} rounds for confirm_rounds={confirm_rounds}, "
                         f"got {len(rounds)}")
    rng = np.random.default_rng(seed)
    curve = []
    for s in slowdowns:
        outcomes = [trial(rng, rounds, s, screen=screen, threshold=threshold, alpha=alpha,
                          confirm_rounds=confirm_rounds, confirm_share=confirm_share) for _ in range(trials)]
        curve.append((s, float(np.mean([o[0] for o in outcomes])), float(np.mean([o[1] for o in outcomes]))))
    return curve

"""perf.yml's `workloads:` section: serving-shaped decode batches, measured beside the dense grid.

A workload is a paged KV cache and the sequence lengths of a batch. Every implementation of one
workload case reads identical inputs: the same lengths, the same shuffled page table, pages of the
platform's `page_size` tokens. Lengths are drawn with Python's `random.Random(seed).random()` (the
one stream Python keeps the same across versions), so a workload is the same batch on every machine.
Checked as the rest of perf.yml is (mlagate/config/__init__.py): an unknown key or a bad value is a ConfigError
naming it.
"""

import functools
import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass
from statistics import NormalDist

from mlagate.case import DENSE, WORKLOAD_TAG_MARK
from mlagate.config.reader import ConfigError, KeyReader, open_section_keys

DISTRIBUTIONS = ("uniform", "lognormal")
MAX_LENGTH = 131072  # the longest context the kernels are tested at (tests/test_paged_gpu.py)
MAX_BATCH = 4096  # a decode batch of a serving engine, with room
TAG_MARK = WORKLOAD_TAG_MARK  # between a workload's name and its definition's digest in a case key (Workload.tag)


@dataclass(frozen=True)
class Workload:
    name: str
    distribution: str  # uniform: every sequence at `mean`; lognormal: a long tail around it
    mean: int  # tokens per sequence, exactly: a case's seqlen, so TFLOPs count real tokens only
    batch: tuple
    heads: tuple
    q_len: tuple = (1,)  # query tokens per sequence (s_q), each its own case
    minimum: int = 1
    maximum: int = MAX_LENGTH
    sigma: float = 0.0  # lognormal shape: the standard deviation of log(length)
    seed: int = 0

    @functools.cache  # a case per implementation, dtype and head count: draw each batch once
    def lengths(self, batch: int) -> tuple:
        """The batch's sequence lengths: clipped to [minimum, maximum], summing to batch x mean."""
        if self.distribution == "uniform":
            return (self.mean,) * batch
        rng = random.Random(self.seed)
        normal = NormalDist()
        z = [normal.inv_cdf(min(max(rng.random(), 1e-12), 1 - 1e-12)) for _ in range(batch)]

        def draw(mu):
            return [min(max(round(math.exp(mu + self.sigma * x)), self.minimum), self.maximum) for x in z]

        low, high = math.log(self.minimum) - 8 * self.sigma, math.log(self.maximum) + 8 * self.sigma
        for _ in range(100):  # the mean grows with mu: bisect to the closest draw
            mid = (low + high) / 2
            low, high = (mid, high) if sum(draw(mid)) < batch * self.mean else (low, mid)
        lengths = draw(high)
        # Then whole tokens, one at a time, to or from the longest sequences that can take them.
        excess = sum(lengths) - batch * self.mean
        order = sorted(range(batch), key=lambda i: (-lengths[i], i))
        while excess:
            step = 1 if excess < 0 else -1
            movable = [i for i in order if self.minimum <= lengths[i] + step <= self.maximum]
            for i in movable[:abs(excess)]:
                lengths[i] += step
                excess += step
        return tuple(lengths)

    def tag(self, page_size: int) -> str:
        """The workload as a case's key holds it: its name and a digest of what it measures (the lengths'
        definition and the page size), so a redefined workload is a new case, never compared with the old."""
        # the measured axes are not the batch's definition (and keep every old workload case's key)
        what = {k: v for k, v in asdict(self).items() if k not in ("name", "batch", "heads", "q_len")}
        digest = hashlib.sha256(json.dumps({**what, "page_size": page_size}, sort_keys=True).encode()).hexdigest()
        return f"{self.name}{TAG_MARK}{digest[:8]}"


def parse(top: KeyReader, heads_allowed, q_lens_allowed) -> dict:
    """{name: Workload} of the `workloads:` section (optional: none without it)."""
    if "workloads" not in top.data:
        return {}
    section = top.section("workloads", open_section_keys(top.data.get("workloads")))
    workloads = {}
    for name in section.data:
        if name == DENSE:
            raise ConfigError(f"workloads.{name}: '{DENSE}' names the grid's own cases; choose another name")
        kind = section.section(name, ("distribution", "mean", "batch", "heads", "q_len", "min", "max", "sigma",
                                      "seed"))
        distribution = kind.get("distribution", str)
        if distribution not in DISTRIBUTIONS:
            raise ConfigError(f"workloads.{name}.distribution: {distribution!r} is not one of "
                              f"{', '.join(DISTRIBUTIONS)}")
        keys = ("distribution", "mean", "batch", "heads", "q_len") + (("min", "max", "sigma", "seed")
                                                              if distribution == "lognormal" else ())
        w = section.section(name, keys)
        for key in keys:
            if key not in w.data:
                raise ConfigError(f"workloads.{name}.{key}: missing")
        mean = w.get("mean", int, minimum=1, maximum=MAX_LENGTH)
        batch = w.int_list("batch")
        if max(batch) > MAX_BATCH:
            raise ConfigError(f"workloads.{name}.batch: {max(batch)} is over {MAX_BATCH} sequences")
        fields = dict(name=name, distribution=distribution, mean=mean, batch=batch,
                      heads=w.int_list("heads", choices=heads_allowed),
                      q_len=w.int_list("q_len", choices=q_lens_allowed))
        if distribution == "lognormal":
            fields.update(minimum=w.get("min", int, minimum=1), maximum=w.get("max", int, maximum=MAX_LENGTH),
                          sigma=w.get("sigma", float, minimum=0, exclusive_min=True, maximum=4),
                          seed=w.get("seed", int, minimum=0))
            if not fields["minimum"] <= mean <= fields["maximum"]:
                raise ConfigError(f"workloads.{name}.mean: {mean} must lie within min {fields['minimum']} and "
                                  f"max {fields['maximum']}")
        workload = Workload(**fields)
        for batch_size in batch:  # token i of s_q sees the cache up to L - s_q + i: a shorter one has no row
            if min(workload.lengths(batch_size)) < max(workload.q_len):
                raise ConfigError(f"workloads.{name}.q_len: {max(workload.q_len)} query tokens, but batch "
                                  f"{batch_size} holds a sequence of {min(workload.lengths(batch_size))} (the "
                                  "kernels refuse a cache shorter than its query tokens)")
        workloads[name] = workload
    return workloads

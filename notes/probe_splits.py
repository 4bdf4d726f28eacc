"""Probe: TFLOPs of each TileLang config and split count on this GPU (cold L2).
Run: PYTHONPATH=$PWD python notes/probe_splits.py"""
import torch

from mlagate.measure import metrics
from mlagate.kernels import mla_decode as m
from mlagate.measure.timer import time_gpu
from mlagate.config import Budget, load

TIMING = load().timing

for batch in (64, 128):
    for seqlen in (4096, 8192):
        shape = m.Shape(batch=batch, seqlen=seqlen)
        inputs = m.random_inputs(shape, device="cuda", seed=0)
        out = torch.empty_like(inputs[0])
        lse = torch.empty(batch, 128, device="cuda")
        for name, splits in (("hopper", (1, 2, 4)), ("cdna3", (4,))):
            for split in splits:
                k = m.compiled(shape, m.CONFIGS[name].with_(num_split=split))
                s = time_gpu(lambda: k(*inputs, out, lse), TIMING, Budget(warmup_ms=100, windows=4))
                med = sorted(s.times_ms)[len(s.times_ms) // 2]
                print(f"{name:7s} split={split} b={batch} s={seqlen}: {med*1e3:8.1f} us "
                      f"{metrics.tflops(metrics.flops(batch, 128, seqlen), med):6.1f} TFLOPs", flush=True)

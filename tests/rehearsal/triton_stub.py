"""The rehearsal's stand-in for Triton's launch of aiter's kernels: no Triton runs on a CPU torch.

``modules()`` gives a ``triton`` and a ``triton.language`` that hold what aiter's modules use at import time
(``triton.jit``, ``tl.constexpr``, ``tl.int64`` ...); sitecustomize puts them in ``sys.modules`` only while
aiter imports (torch must never see a Triton, or its own Triton paths break). A ``@triton.jit`` kernel
launched ``kernel[grid](...)`` runs the torch translation registered for it in LAUNCHES, and a kernel
without one fails, naming it: nothing aiter launches passes silently.
"""

import inspect
import types

import torch

LAUNCHES = {}
launched = []  # kernel names, in order


class JITFunction:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.signature = inspect.signature(fn)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if self.__name__ not in LAUNCHES:
                raise NotImplementedError(f"rehearsal: no CPU translation of the Triton kernel {self.__name__}")
            # launch options (num_warps, num_stages, waves_per_eu ...) are not the kernel's arguments
            bound = self.signature.bind_partial(*args, **{k: v for k, v in kwargs.items()
                                                          if k in self.signature.parameters})
            launched.append(self.__name__)
            return LAUNCHES[self.__name__](grid, **bound.arguments)

        return launch


def jit(fn=None, **options):
    return JITFunction(fn) if fn is not None else JITFunction


def _next_power_of_2(n):
    return 1 << (int(n) - 1).bit_length()


def _cdiv(a, b):
    return -(-a // b)


def modules():
    triton = types.ModuleType("triton")
    language = types.ModuleType("triton.language")
    triton.jit, triton.language, triton.next_power_of_2, triton.cdiv = jit, language, _next_power_of_2, _cdiv
    triton.Config = lambda *a, **k: (a, k)
    triton.autotune = triton.heuristics = lambda *a, **k: (lambda fn: fn)
    for name in ("constexpr", "int1", "int8", "int16", "int32", "int64", "uint32", "float16", "bfloat16",
                 "float32", "float8e4b8", "float8e4nv", "tensor", "dtype"):
        setattr(language, name, type(name, (), {}))
    return {"triton": triton, "triton.language": language}


def _fwd_kernel_stage2_asm(grid, Mid_O, Mid_lse, O, qo_indptr, kv_indptr, num_kv_splits_indptr, MAYBE_FINAL_OUT,  # noqa: E741
                           BATCH_NUM, Lv, mgc, **strides):
    """aiter/mla.py's stage-2 reduction, in torch: per sequence and head, the first
    min(its splits, cdiv(KV length, mgc)) splits combined by their log-sum-exp."""
    batches, heads = grid
    if MAYBE_FINAL_OUT and int(num_kv_splits_indptr[BATCH_NUM]) == BATCH_NUM:
        raise NotImplementedError("rehearsal: stage 2's FINAL_OUT copy (one split per sequence) is not modelled")
    for b in range(batches):
        splits = int(num_kv_splits_indptr[b + 1] - num_kv_splits_indptr[b])
        valid = min(splits, _cdiv(int(kv_indptr[b + 1] - kv_indptr[b]), mgc))
        qo = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        lse = Mid_lse[qo, :valid, :heads, 0]  # [q, splits, heads]
        weights = torch.softmax(lse, dim=1)
        O[qo, :heads] = torch.einsum("qsh,qshd->qhd", weights, Mid_O[qo, :valid, :heads, :Lv]).to(O.dtype)


LAUNCHES["_fwd_kernel_stage2_asm"] = _fwd_kernel_stage2_asm

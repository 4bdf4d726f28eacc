"""Would the fp8 cache beat the bf16 one if a warpgroup of its own converted the tiles? (GPU; lowering on a CPU)

On the H200 the hopper family's fp8 kernel at 16 heads takes the same time as on the H100 (112.8 against 111.0 µs,
b64 s4096) while the bf16 one follows the memory (86.9 against 118.4): the fp8 kernel is bound by its one consumer
warpgroup, which converts each tile and runs the GEMMs (docs/measurements.md, 2026-12-06, third session). This is
that kernel (dense, the pipelined schedule's head block under one wgmma tile: one consumer warpgroup, mma.sync) with
the conversion moved to a second warpgroup: it reads each fp8 tile from global memory into registers, waits until
the consumers are done with the bf16 tile it will overwrite (two, alternating), writes it converted, and signals
it. The consumers only wait, multiply and run the softmax, as on a bf16 cache. Not part of the product: if it wins,
it replaces attend_macro's fp8 path.

    python -m lab.fp8_converter [--batch 64 --batch 128] [--seqlen 4096] [--s-q 1 --s-q 2] [--heads 16]
    python -m lab.fp8_converter --lower-only   # lower for sm_90a on a CPU (CI runs it)

Per point: this kernel, the hopper fp8 kernel and the hopper bf16 kernel on the same values (mlagate's timer,
perf.yml's `record` budget), each checked against the float64 reference of the dequantized cache first.
"""

import argparse
import sys

CONVERTERS = 128  # threads of the converting warpgroup


def program(p):
    """The dense decode of plan ``p`` (mla_decode.plan: an fp8 cache, one 128-thread consumer warpgroup) with a
    converting warpgroup beside it."""
    import tilelang.language as T

    from mlagate.kernels import mla_decode as m

    s, c = p.shape, p.config
    if not (s.kv_fp8 and c.operands_in_shared and p.threads == 128):
        raise ValueError(f"{p}: the converter kernel takes an fp8 cache under the hopper family's one-warpgroup "
                         "head block")
    batch, rows, seqlen, dim, pe_dim = s.batch, s.rows, s.seqlen, s.dim, s.pe_dim
    dtype, accum, kv_dtype = s.dtype, "float32", s.kv_dtype
    block_N, block_H, heads, s_q = c.block_N, p.block_H, s.heads, s.s_q
    num_split, split_len = p.num_split, p.split_len
    n_blocks = split_len // block_N
    head_blocks = rows // block_H
    policy = getattr(T.GemmWarpPolicy, c.policy)
    consumers = p.threads
    split = num_split > 1
    softmax_step = m.softmax_step_macro(block_H, block_N, dim)

    @T.macro
    def convert(KV, K_pe, bx, start, KV_reg, K_pe_reg, KV_b, K_pe_b, full, empty, b, use):
        """Tile ``start`` of sequence bx into bf16 buffer b, its ``use``-th fill."""
        T.copy(KV[bx, start:start + block_N, 0, :], KV_reg)
        T.copy(K_pe[bx, start:start + block_N, 0, :], K_pe_reg)
        if use > 0:
            T.barrier_wait(empty[b], (use - 1) % 2)
        T.copy(KV_reg, KV_b)
        T.copy(K_pe_reg, K_pe_b)
        T.barrier_arrive(full[b])

    @T.macro
    def attend_tile(Q_buf, Q_pe_buf, P_buf, KV_b, K_pe_b, full, empty, b, use, start, by, scale, acc_s, acc_o,
                    logsum, scores_max, scores_max_prev, scores_scale, scores_sum):
        T.barrier_wait(full[b], use % 2)
        T.gemm(Q_buf, KV_b, acc_s, transpose_B=True, policy=policy, clear_accum=True)
        T.gemm(Q_pe_buf, K_pe_b, acc_s, transpose_B=True, policy=policy)
        if start + block_N > seqlen - (s_q - 1):  # the tail, and with s_q > 1 the causal edge
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.if_then_else(start + j < seqlen - (s_q - 1) + (by * block_H + i) // heads,
                                             acc_s[i, j], m.MASKED)
        softmax_step(acc_s, P_buf, acc_o, logsum, scores_max, scores_max_prev, scores_scale, scores_sum, scale)
        T.gemm(P_buf, KV_b, acc_o, policy=policy)
        T.barrier_arrive(empty[b])

    @T.macro
    def decode(Q, Q_pe, KV, K_pe, Kv_scale, bx, by, bz, Lse_out, O_out):
        """The consumers' online softmax over the n_blocks tiles of split bz, and the converters feeding them; the
        result goes to (glse, O_partial) of a split launch, (Lse, Output) of an unsplit one."""
        first_token = bz * split_len
        T.import_source(m.E4M3_TO_BF16)
        Q_buf = T.alloc_shared([block_H, dim], dtype)
        Q_pe_buf = T.alloc_shared([block_H, pe_dim], dtype)
        P_buf = T.alloc_shared([block_H, block_N], dtype)
        KV_0 = T.alloc_shared([block_N, dim], dtype)
        KV_1 = T.alloc_shared([block_N, dim], dtype)
        K_pe_0 = T.alloc_shared([block_N, pe_dim], dtype)
        K_pe_1 = T.alloc_shared([block_N, pe_dim], dtype)
        full = T.alloc_barrier(arrive_count=[CONVERTERS, CONVERTERS])
        empty = T.alloc_barrier(arrive_count=[consumers, consumers])
        tx = T.get_thread_binding()
        if tx >= consumers:
            KV_reg = T.alloc_fragment([block_N, dim], kv_dtype)
            K_pe_reg = T.alloc_fragment([block_N, pe_dim], kv_dtype)
            for k in T.serial(T.ceildiv(n_blocks, 2)):
                convert(KV, K_pe, bx, first_token + 2 * k * block_N, KV_reg, K_pe_reg, KV_0, K_pe_0, full,
                        empty, 0, k)
                if 2 * k + 1 < n_blocks:
                    convert(KV, K_pe, bx, first_token + (2 * k + 1) * block_N, KV_reg, K_pe_reg, KV_1, K_pe_1,
                            full, empty, 1, k)
        else:
            acc_s = T.alloc_fragment([block_H, block_N], accum)
            acc_o = T.alloc_fragment([block_H, dim], accum)
            logsum = T.alloc_fragment([block_H], accum)
            scores_max = T.alloc_fragment([block_H], accum)
            scores_max_prev = T.alloc_fragment([block_H], accum)
            scores_scale = T.alloc_fragment([block_H], accum)
            scores_sum = T.alloc_fragment([block_H], accum)
            scale = m.score_scale(s, Kv_scale)
            T.copy(Q[bx, by * block_H:(by + 1) * block_H, :], Q_buf)
            T.copy(Q_pe[bx, by * block_H:(by + 1) * block_H, :], Q_pe_buf)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum))
            for k in T.serial(T.ceildiv(n_blocks, 2)):
                attend_tile(Q_buf, Q_pe_buf, P_buf, KV_0, K_pe_0, full, empty, 0, k,
                            first_token + 2 * k * block_N, by, scale, acc_s, acc_o, logsum, scores_max,
                            scores_max_prev, scores_scale, scores_sum)
                if 2 * k + 1 < n_blocks:
                    attend_tile(Q_buf, Q_pe_buf, P_buf, KV_1, K_pe_1, full, empty, 1, k,
                                first_token + (2 * k + 1) * block_N, by, scale, acc_s, acc_o, logsum, scores_max,
                                scores_max_prev, scores_scale, scores_sum)
            for i in T.Parallel(block_H):  # V was read as stored: its scale joins the normalisation
                scores_scale[i] = Kv_scale[0] / logsum[i]
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] *= scores_scale[i]
            if split:
                for i in T.Parallel(block_H):
                    logsum[i] = T.log2(logsum[i]) + scores_max[i] * scale
                T.copy(logsum, Lse_out[bx, by * block_H:(by + 1) * block_H, bz])
                T.copy(acc_o, O_out[bx, by * block_H:(by + 1) * block_H, bz, :])
            else:
                for i in T.Parallel(block_H):
                    logsum[i] = (T.log2(logsum[i]) + scores_max[i] * scale) * m.LN2
                T.copy(logsum, Lse_out[bx, by * block_H:(by + 1) * block_H])
                T.copy(acc_o, Q_buf)  # Q is read no more: stage the output there
                T.copy(Q_buf, O_out[bx, by * block_H:(by + 1) * block_H, :])

    combine = m.combine_macro(dim)
    threads = consumers + CONVERTERS

    if split:
        @T.prim_func
        def main_split(
                Q: T.Tensor([batch, rows, dim], dtype),
                Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
                KV: T.Tensor([batch, seqlen, 1, dim], kv_dtype),
                K_pe: T.Tensor([batch, seqlen, 1, pe_dim], kv_dtype),
                Kv_scale: T.Tensor([1], "float32"),
                glse: T.Tensor([batch, rows, num_split], accum),
                O_partial: T.Tensor([batch, rows, num_split, dim], accum),
                Output: T.Tensor([batch, rows, dim], dtype),
                Lse: T.Tensor([batch, rows], accum),
        ):
            with T.Kernel(batch, head_blocks, num_split, threads=threads) as (bx, by, bz):
                decode(Q, Q_pe, KV, K_pe, Kv_scale, bx, by, bz, glse, O_partial)

            with T.Kernel(rows, batch, threads=128) as (hid, bid):
                combine(glse, O_partial, Output, Lse, bid, hid, num_split)

        return main_split

    @T.prim_func
    def main_no_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([batch, seqlen, 1, dim], kv_dtype),
            K_pe: T.Tensor([batch, seqlen, 1, pe_dim], kv_dtype),
            Kv_scale: T.Tensor([1], "float32"),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        with T.Kernel(batch, head_blocks, threads=threads) as (bx, by):
            decode(Q, Q_pe, KV, K_pe, Kv_scale, bx, by, 0, Lse, Output)

    return main_no_split


def Compiled(shape, arch: str = "sm_90"):
    """The converter kernel of one shape, launched like mla_decode.CompiledDecode (whose call it is)."""
    from mlagate.kernels import mla_decode as m

    class ConverterDecode(m.CompiledDecode):
        def __init__(self):
            m.CompiledProgram.__init__(self, m.plan(shape, m.HOPPER, arch), program, arch)

    return ConverterDecode()


def lower(shape, arch: str = "sm_90a") -> str:
    from mlagate.kernels import mla_decode as m

    return m.lowered(m.plan(shape, m.HOPPER, arch), arch, program).kernel_source


def compile_one(job) -> None:
    """Compile one kernel into TileLang's disk cache (a spawned process: the timing process then loads it)."""
    import dataclasses

    from mlagate.kernels import mla_decode as m

    kind, shape = job
    if kind == "converter":
        Compiled(shape)
    else:
        m.compiled(shape if kind == "fp8" else dataclasses.replace(shape, kv_dtype="bfloat16"), m.HOPPER)


def shapes(batches, seqlens, s_qs, heads, kv_dtype):
    from mlagate.kernels import mla_decode as m

    return [m.Shape(batch=b, seqlen=s, heads=h, dtype="bfloat16", s_q=q, kv_dtype=kv_dtype)
            for q in s_qs for b in batches for s in seqlens for h in heads]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--seqlen", type=int, action="append")
    parser.add_argument("--s-q", type=int, action="append")
    parser.add_argument("--heads", type=int, action="append")
    parser.add_argument("--lower-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=12)
    args = parser.parse_args(argv)
    from mlagate.kernels import mla_decode as m

    points = shapes(args.batch or [64, 128], args.seqlen or [4096], args.s_q or [1, 2], args.heads or [16],
                    m.FP8_FORMAT["sm_90"])
    if args.lower_only:
        for shape in points:
            source = lower(shape)
            print(f"{shape}: lowered, {len(source)} characters")
        return 0

    import dataclasses

    import torch

    from mlagate import config as config_mod
    from mlagate.measure import timer
    from mlagate.measure.precompile import in_processes
    from mlagate.measure.summary import median

    jobs = [(kind, shape) for shape in points for kind in ("converter", "fp8", "bf16")]
    failed = [f"{job}: {e}" for job, e in in_processes(compile_one, jobs, args.jobs) if isinstance(e, Exception)]
    if failed:
        print("compile failed:", *failed, sep="\n")
        return 1
    timing = config_mod.load().timing
    for shape in points:
        q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, "cuda", seed=0)
        kv16, k_pe16 = (t.to(torch.bfloat16) for t in m.dequantized(kv, k_pe, kv_scale))
        scale = m.scale_tensor(kv_scale, "cuda")
        ref = m.reference(q, q_pe, kv, k_pe, kv_scale=kv_scale)[0]
        kernels = {"converter fp8": (Compiled(shape), (kv, k_pe, scale)),
                   "hopper fp8": (m.compiled(shape, m.HOPPER), (kv, k_pe, scale)),
                   "hopper bf16": (m.compiled(dataclasses.replace(shape, kv_dtype="bfloat16"), m.HOPPER),
                                   (kv16, k_pe16))}
        times = {}
        for name, (kernel, cache) in kernels.items():
            out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda")
            kernel(q, q_pe, cache[0], cache[1], out, lse, *cache[2:])
            torch.cuda.synchronize()
            error = (out.float() - ref).abs().max().item()
            ok = torch.allclose(out.float(), ref, rtol=0.01, atol=0.01)
            times[name] = median(timer.time_gpu(lambda: kernel(q, q_pe, cache[0], cache[1], out, lse, *cache[2:]),
                                                timing, "record").times_ms) * 1e3
            print(f"b={shape.batch:4d} s={shape.seqlen:6d} h={shape.heads:4d} s_q={shape.s_q} {name:14s} "
                  f"{times[name]:8.1f} us  max |error| {error:.1e} {'ok' if ok else 'WRONG'}", flush=True)
        print(f"  converter fp8: {times['hopper bf16'] / times['converter fp8']:.3f}x the bf16 cache's speed, "
              f"{times['hopper fp8'] / times['converter fp8']:.3f}x the hopper fp8 kernel's", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

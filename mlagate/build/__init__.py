"""build: lower and compile every kernel on a CPU and record its compiler resources.

The flow, one module a step: plan (targets, the programs of each config and shape) ->
lower (tilelang: source, dynamic shared memory, threads) -> toolchain (nvcc or hipcc,
tilelang's own flags) -> analyse (source, ptxas -v, SASS/PTX counts, hipcc remarks) ->
report (one row per kernel, a dict per target). mlagate.decide.build_rules decides on it.

Per ``__global__`` function, ``cuda:<arch>`` records ptxas' registers, spill stores/loads,
stack frame, static shared memory and any "wgmma serialized" warning (C7511), and HGMMA
counts; ``hip:<arch>`` with hipcc records VGPRs, AGPRs, SGPRs, scratch, spilled registers,
static LDS and waves per SIMD, and without hipcc stays at source level.
"""

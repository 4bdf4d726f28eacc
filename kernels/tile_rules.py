"""The few tile-config rules perf.yml's reader checks too, without importing TileLang (~5 s): the kernel
(mla_decode.TileConfig.check) and mlagate/config/tune.py both read them here, so a tune space is refused at
config.load by the same rule the kernel refuses a config with.

The interleaved re-measure loads an older commit's kernel file beside today's modules, so a commit's copy of this
file is not the one its kernel reads: keep here only refusals, never anything that changes the kernel it builds."""

# Whole 16-row MMA/MFMA tiles (block_N, block_H) and whole warps of 32 (threads; gfx942's 64-wide wavefronts
# are mla_decode.threads_for's business, not refused here).
MULTIPLE_OF = {"block_N": 16, "block_H": 16, "threads": 32}
# TileLang's GemmWarpPolicy members a config may name.
POLICIES = ("FullRow", "FullCol", "Square")
POLICY_CHOICES = f"{', '.join(POLICIES[:-1])} or {POLICIES[-1]}"  # as an error names them
# Each stage is one more K/V tile (block_N x 576 elements) in shared memory, and a decode loop of a few block_N
# steps per split has no latency left to hide past 2-3: more than 4 is surely a typo.
MAX_STAGES = 4
# The architecture (perf.yml's name, kernels/tuned/<arch>.yaml) each config family is written and tuned for.
FAMILY_ARCH = {"cdna3": "gfx942", "hopper": "sm_90", "seesaw": "sm_90"}
# An fp8 KV cache's format per architecture, the one home of that fact (mlagate/hardware.py reads it per platform):
# Hopper runs OCP e4m3fn, CDNA3 (gfx942) the fnuz variant (no negative zero, exponent bias 8, max 240): the same bits
# mean other values on the other arch, so a cache in the other's format is refused.
FP8_FORMAT = {"sm_90": "float8_e4m3fn", "sm_90a": "float8_e4m3fn", "gfx942": "float8_e4m3fnuz"}
FP8_DTYPES = tuple(sorted(set(FP8_FORMAT.values())))

"""asv benchmarks: every implementation x batch x seqlen x dtype x heads from perf.yml.

One measurement per record: both classes share setup_cache (asv keys it by the function),
which times the whole grid once with mlagate's one timing function. TimeDecode hands each
case's samples to asv through a replaying timer, so asv stores the very samples the TFLOPs
and vendor ratios of Throughput come from, and two commits compare sample by sample. A case
that cannot run here is skipped (NotImplementedError with the reason); a wrong result fails
the benchmark. The grid comes from MLAGATE_GRID (quick|full, default full), MLAGATE_DTYPES
and MLAGATE_IMPLS (comma-separated).
"""

from mlagate.measure import asv_suite as suite

PARAMS, PARAM_NAMES = suite.params()
suite.preload()


class TimeDecode:
    params, param_names = PARAMS, PARAM_NAMES
    setup_cache = staticmethod(suite.measure_grid)
    timer = suite.clock
    number = 1
    rounds = 1
    repeat = 1  # setup sets it to the case's sample count
    warmup_time = 0  # measure_grid warmed up; a warm-up here would only consume samples
    timeout = 1800

    def setup(self, grid, impl, batch, seqlen, dtype, heads):
        self.repeat = suite.replay(grid, impl, batch, seqlen, dtype, heads)

    def time_decode(self, grid, impl, batch, seqlen, dtype, heads):
        suite.clock.advance()


class Throughput:
    params, param_names = PARAMS, PARAM_NAMES
    setup_cache = staticmethod(suite.measure_grid)
    timeout = 1800

    def setup(self, grid, impl, batch, seqlen, dtype, heads):
        suite.require_measured(grid, impl, batch, seqlen, dtype, heads)

    def track_tflops(self, grid, impl, batch, seqlen, dtype, heads):
        return suite.metric(grid, "tflops", impl, batch, seqlen, dtype, heads)

    track_tflops.unit = "TFLOPs"

    def track_vendor_ratio(self, grid, impl, batch, seqlen, dtype, heads):
        return suite.metric(grid, "vendor_ratio", impl, batch, seqlen, dtype, heads)

    track_vendor_ratio.unit = "x vendor"

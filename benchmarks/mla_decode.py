"""asv benchmarks: every implementation x batch x seqlen x dtype x heads from perf.yml.

TimeDecode holds latency with its samples: asv's ``timer`` is a device-event
clock, so each sample is the kernel's GPU time with a cold cache, and two
commits compare sample by sample. Throughput runs the whole grid once per asv
run (setup_cache) and tracks TFLOPs and the ratio to the platform's vendor
kernel, measured in that same run. A case that cannot run here is skipped
(NotImplementedError with the reason); a wrong result fails the benchmark.
The grid comes from MLAGATE_GRID (quick|full, default full), MLAGATE_DTYPES
and MLAGATE_IMPLS (comma-separated).
"""

from mlagate.measure import asv_suite as suite

PARAMS, PARAM_NAMES = suite.params()
suite.preload()


class TimeDecode:
    params, param_names = PARAMS, PARAM_NAMES
    timer = suite.clock
    number = 1
    rounds = 1
    repeat = suite.repeat
    warmup_time = suite.warmup_s
    timeout = 600

    def setup(self, impl, batch, seqlen, dtype, heads):
        self.launch = suite.prepared(impl, batch, seqlen, dtype, heads)

    def time_decode(self, impl, batch, seqlen, dtype, heads):
        suite.clock.run(self.launch)


class Throughput:
    params, param_names = PARAMS, PARAM_NAMES
    timeout = 1800

    def setup_cache(self):
        return suite.measure_grid()

    def setup(self, grid, impl, batch, seqlen, dtype, heads):
        suite.require_measured(grid, impl, batch, seqlen, dtype, heads)

    def track_tflops(self, grid, impl, batch, seqlen, dtype, heads):
        return suite.metric(grid, "tflops", impl, batch, seqlen, dtype, heads)

    track_tflops.unit = "TFLOPs"

    def track_vendor_ratio(self, grid, impl, batch, seqlen, dtype, heads):
        return suite.metric(grid, "vendor_ratio", impl, batch, seqlen, dtype, heads)

    track_vendor_ratio.unit = "x vendor"

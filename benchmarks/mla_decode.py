"""asv benchmarks: every implementation x batch x seqlen x dtype x heads from perf.yml, and the
serving workloads (perf.yml `workloads:`) in classes of their own, with a workload parameter.

One measurement per record: every class shares setup_cache (asv keys it by the function), which
times the whole grid and its workloads once with mlagate's one timing function. The Time classes
hand each case's samples to asv through a replaying timer, so asv stores the very samples the
TFLOPs and vendor ratios of the Throughput classes come from, and two commits compare sample by
sample. A case that cannot run here is skipped (NotImplementedError with the reason); a wrong
result fails the benchmark. The grid comes from MLAGATE_GRID (quick|full, default full),
MLAGATE_DTYPES and MLAGATE_IMPLS (comma-separated).
"""

from mlagate.measure import asv_suite as suite

PARAMS, PARAM_NAMES = suite.params()
WORKLOAD_PARAMS, WORKLOAD_PARAM_NAMES = suite.params(workloads=True)
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

    def setup(self, grid, *key):
        self.repeat = suite.replay(grid, *key)

    def time_decode(self, grid, *key):
        suite.clock.advance()


class Throughput:
    params, param_names = PARAMS, PARAM_NAMES
    setup_cache = staticmethod(suite.measure_grid)
    timeout = 1800

    def setup(self, grid, *key):
        suite.require_measured(grid, *key)

    def track_tflops(self, grid, *key):
        return suite.metric(grid, "tflops", *key)

    track_tflops.unit = "TFLOPs"

    def track_vendor_ratio(self, grid, *key):
        return suite.metric(grid, "vendor_ratio", *key)

    track_vendor_ratio.unit = "x vendor"


if WORKLOAD_PARAMS[0]:  # the grid measures workloads: their classes (store.results_file.WORKLOAD_BENCH)
    class TimeWorkload(TimeDecode):
        params, param_names = WORKLOAD_PARAMS, WORKLOAD_PARAM_NAMES

    class WorkloadThroughput(Throughput):
        params, param_names = WORKLOAD_PARAMS, WORKLOAD_PARAM_NAMES

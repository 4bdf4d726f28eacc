"""An MI300X host as far as mlagate can tell, on a CPU: the rehearsal of the compose `bench` service.

Loaded by every Python process of the rehearsal (this folder is first on PYTHONPATH, and mlagate hands
PYTHONPATH on to asv's benchmark processes and to its bench workers). Active only with
MLAGATE_REHEARSAL set. What stands in, and nothing more:

- torch reports a ROCm build with one AMD Instinct MI300X (gcnArchName gfx942, 304 CUs), so mlagate's
  own platform and architecture detection runs unchanged;
- tensors live on the CPU (``environment.device``, and ``mla_decode.check_device`` accepts it);
- TileLang's compiled kernel is the float32 reference behind the real ``plan`` for gfx942, because a
  CPU cannot run HIP code (`mlagate build` lowers the real kernels for gfx942 on a CPU);
- aiter is the installed amd-aiter, its real Python (``mla_decode_fwd``, ``get_meta_param``, the JIT
  loader and its argument check); below it stand in only what needs ROCm or a GPU: ``hipconfig`` and
  ``rocminfo`` (rocm/bin, on PATH: an MI300X, gfx942, 304 CUs), the modules aiter JIT-builds (aiter_jit/:
  the enum, the asm stage 1, and for the persistent fp8 call the work lists and the reduce; copied into
  AITER_JIT_DIR, where aiter imports them from), and Triton's launch of aiter's
  stage-2 kernel (triton_stub.py, present only while aiter imports); torch's ``device="cuda"`` is the CPU;
- GPU timing returns samples recorded on an H200 (tests/fixtures/h200/bench_full_fp16_2026-11-29.json):
  the TileLang stand-in gets tilelang-hopper's, aiter FlashMLA's, torch its own, at the same batch
  and seqlen 4096. They exercise the record and the gate; they are no MI300X measurement.
"""

import functools
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
RECORDED = HERE.parent / "fixtures" / "h200" / "bench_full_fp16_2026-11-29.json"
STANDS_FOR = {"tilelang-cdna3": "tilelang-hopper", "aiter": "flash_mla", "torch": "torch"}
MI300X = SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4,
                         multi_processor_count=304, L2_cache_size=4 << 20, total_memory=192 << 30)


def recorded_samples(impl, batch):
    rows = json.loads(RECORDED.read_text())["results"]
    row = next(r for r in rows if (r["impl"], r["batch"], r["seqlen"]) == (STANDS_FOR[impl], batch, 4096))
    return tuple(row["samples"]["times_ms"])


def patch_torch(torch):
    torch.version.hip = "7.2.24120"
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_properties = lambda device=None: MI300X
    cuda.get_device_name = lambda device=None: MI300X.name
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    for name in FACTORIES:  # aiter allocates some of its tensors on device="cuda" (get_meta_param)
        setattr(torch, name, on_the_cpu(getattr(torch, name)))


FACTORIES = ("arange", "empty", "zeros", "ones", "full", "tensor", "randn", "rand")


def on_the_cpu(factory):
    @functools.wraps(factory)
    def make(*args, device=None, **kwargs):
        if device is not None and str(device).startswith("cuda"):
            device = "cpu"
        return factory(*args, device=device, **kwargs)

    return make


def assert_the_wheel(aiter):
    """The aiter that imported is the installed amd-aiter wheel's, never one of this folder."""
    import importlib.metadata

    wheel = Path(importlib.metadata.distribution("amd-aiter").locate_file("aiter")).resolve()
    assert Path(aiter.__file__).resolve().parent == wheel, f"rehearsal: aiter from {aiter.__file__}, not {wheel}"


def patch_aiter_import(run):
    """aiter's modules import triton, which a CPU torch lacks: the stub, only while aiter imports. torch's own
    Triton checks (torch._dynamo and what it loads) run first and see no Triton."""
    import torch._dynamo  # noqa: F401

    sys.path.insert(0, str(HERE))
    import triton_stub

    sys.path.remove(str(HERE))
    stubs = triton_stub.modules()
    assert not set(stubs) & set(sys.modules), "rehearsal: a real triton is loaded"
    sys.modules.update(stubs)
    try:
        run()
    finally:
        for name in stubs:
            sys.modules.pop(name, None)


def patch_environment(environment):
    import torch

    environment.device = lambda: torch.device("cpu")


def patch_timer(timer):
    def samples_of(fn, shape):
        return recorded_samples(fn.rehearsal_impl, shape[0])

    def time_gpu(fn, timing, budget="record", *, device=None):
        from mlagate.case import Samples

        times = samples_of(fn, fn.rehearsal_shape)
        assert len(times) >= timing.min_samples
        return Samples(times, "rehearsal: H200 samples", 0, 0, MI300X.name, budget=budget)

    timer.time_gpu = time_gpu


def patch_kernels(m):
    def check_device(named):
        if {t.device.type for t in named.values()} != {"cpu"}:
            raise ValueError("rehearsal: inputs must be on the stand-in device (cpu)")

    class CompiledDecode:
        """The real plan for the real arch; the reference stands in for the HIP kernel."""

        def __init__(self, shape, config, arch, sm_count):
            assert arch == "gfx942", f"rehearsal: expected gfx942, detected {arch}"
            self.plan = m.plan(shape, config, arch, sm_count)

        def __call__(self, q, q_pe, kv, k_pe, out, lse, kv_scale=None):
            # an fp8 cache's scale: the float32 [1] tensor the real kernel reads (impls._scaled), checked as such
            assert (kv_scale is None) == (not self.plan.shape.kv_fp8), "rehearsal: kv_scale iff an fp8 cache"
            if kv_scale is not None:
                assert kv_scale.dtype == m.scale_tensor(1.0, "cpu").dtype and kv_scale.shape == (1,)
            o, o_lse = m.reference(q, q_pe, kv, k_pe, kv_scale=None if kv_scale is None else float(kv_scale))
            out.copy_(o)
            lse.copy_(o_lse)
            return out, lse

    m.check_device, m.CompiledDecode = check_device, CompiledDecode


def patch_impls(impls):
    real = impls.prepare

    def prepare(impl, inputs, device):
        launch = real(impl, inputs, device)
        launch.rehearsal_impl, launch.rehearsal_shape = impl, tuple(inputs[0].shape)
        return launch

    impls.prepare = prepare


PATCHES = {"torch": patch_torch, "mlagate.measure.timer": patch_timer,
           "mlagate.measure.environment": patch_environment,
           "mlagate.kernels.mla_decode": patch_kernels, "mlagate.measure.impls": patch_impls, "aiter": None}


def _patched(name):
    """Runs a module of PATCHES, then patches it (aiter: its import under the Triton stub, then the wheel check)."""
    def exec_module(module, run):
        if name == "aiter":
            patch_aiter_import(run)
            return assert_the_wheel(module)
        run()
        PATCHES[name](module)

    return exec_module


if os.environ.get("MLAGATE_REHEARSAL"):
    sys.path.append(TESTS := str(Path(__file__).resolve().parent.parent))
    from module_hooks import AroundExec  # tests/ on the path for this import alone

    sys.path.remove(TESTS)
    sys.meta_path.insert(0, AroundExec({name: _patched(name) for name in PATCHES}))

"""The seesaw schedule (kernels/mla_decode_seesaw.py) without a GPU: its config's contract, its plan, and
what TileLang lowers it to for sm_90a."""

import dataclasses
import re
from pathlib import Path

import pytest

from mlagate import config
from mlagate.build.analyse import split_kernels
from mlagate.kernels import mla_decode as m


@pytest.mark.parametrize("field, value", [("block_N", 64), ("block_H", 32), ("threads", 128),
                                          ("operands_in_shared", False)])
def test_a_seesaw_config_off_its_one_shape_is_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"^config seesaw: the seesaw schedule takes {field}="):
        m.SEESAW.with_(**{field: value}).check()


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="^config hopper: schedule must be one of"):
        m.HOPPER.with_(schedule="zigzag").check()


def test_the_seesaw_runs_on_hopper_only():
    assert m.SEESAW.runs_on("sm_90a") and not m.SEESAW.runs_on("gfx942")
    assert m.HOPPER.runs_on("gfx942") and m.CDNA3.runs_on("sm_90")
    with pytest.raises(ValueError, match="config seesaw: the seesaw schedule needs Hopper"):
        m.plan(m.Shape(batch=1, seqlen=4096), m.SEESAW, "gfx942")


def test_the_seesaw_takes_deepseeks_dims_only():
    with pytest.raises(ValueError, match="built for dim 512 \\+ pe_dim 64"):
        m.plan(m.Shape(batch=1, seqlen=4096, dim=256), m.SEESAW, "sm_90")


def test_the_seesaw_over_pages_takes_64_token_pages_and_the_balanced_schedule_only():
    from mlagate.kernels import mla_decode_paged

    paged = mla_decode_paged.PagedShape(batch=2, heads=16, max_pages=4, page_size=64)
    p = mla_decode_paged.plan(paged, m.SEESAW, "sm_90")
    assert (p.config.schedule, p.parts, p.block_H) == ("seesaw", 132, 16)
    for shape, tile in ((dataclasses.replace(paged, page_size=1, max_pages=256), m.SEESAW),
                        (paged, m.SEESAW.with_(num_split=2))):
        with pytest.raises(ValueError, match="the seesaw over pages takes pages of 64 tokens"):
            mla_decode_paged.plan(shape, tile, "sm_90")
    # a capacity of one tile, or an fp8 cache, runs the pipelined kernel (mla_decode.kernel_config), paged too
    one_tile = dataclasses.replace(paged, max_pages=1)
    assert mla_decode_paged.plan(one_tile, m.SEESAW, "sm_90").config.schedule == "pipelined"
    fp8 = dataclasses.replace(paged, dtype="bfloat16", kv_dtype="float8_e4m3fn")
    assert mla_decode_paged.plan(fp8, m.SEESAW, "sm_90").config.schedule == "pipelined"


@pytest.mark.slow
@pytest.mark.parametrize("heads, s_q", [(16, 1), (16, 2), (128, 1), (128, 2)])
def test_the_seesaw_over_pages_lowers_for_sm_90a_with_a_tma_load_per_page(heads, s_q):
    """One thread block per (head block, partition), one wave, walking its partition's pieces with the barriers'
    parities carried on; the page read through the block table; the shared combine, for sequences split into
    pieces only (a sequence of one piece writes its output from the decode kernel)."""
    from mlagate.kernels import mla_decode_paged

    lengths = [1, 131072, 700, 64, 65]
    shape = mla_decode_paged.PagedShape.holding(lengths, heads, 64, "bfloat16", s_q=s_q)
    p = mla_decode_paged.plan(shape, m.SEESAW, "sm_90a")
    source = mla_decode_paged.lowered(p, "sm_90a").kernel_source
    assert "tma_load" in source and "Block_table" in source and "main_balanced_kernel" in source
    assert re.search(r"for \(int w = 0; w < \(Parts\[", source) and "pairs_done = (pairs_done + n_pairs)" in source
    assert "__launch_bounds__(256" in source
    kernels = split_kernels(source)
    assert "*(uint1*)(Output + " in kernels["main_balanced_kernel"][1]
    combine = kernels["main_balanced_kernel_1"][1]  # over the split sequences only: -1 stands for none
    assert "int bid = Merged[" in combine and "if (0 <= bid)" in combine
    sched = mla_decode_paged.balanced_schedule(lengths, p.config.block_N, p.parts)
    assert all(first % 128 == 0 for _, first, _ in sched.pieces)  # pieces start on a pair of pages


def test_a_ladder_of_a_gated_seesaw_patches_the_seesaw_file(tmp_path):
    from mlagate.ladder import run as ladder

    cfg = config.load()
    default = ladder.plan(cfg, base_rev="HEAD", out=str(tmp_path / "out"))  # the platform's config and vendors
    assert default.impls == ("tilelang-seesaw", "flash_mla", "flashinfer")
    assert default.files == ("kernels/mla_decode_seesaw.py",)
    gated = dataclasses.replace(cfg, gate=dataclasses.replace(cfg.gate, gated=("tilelang-seesaw",)))
    plan = ladder.plan(gated, base_rev="HEAD", impls="tilelang-seesaw,flash_mla", out=str(tmp_path / "out"))
    assert plan.files == ("kernels/mla_decode_seesaw.py",) and {c.impl for c in plan.cases} == {"tilelang-seesaw"}
    both = dataclasses.replace(cfg, gate=dataclasses.replace(cfg.gate, gated=("tilelang-hopper", "tilelang-seesaw")))
    plan = ladder.plan(both, base_rev="HEAD", impls="tilelang-hopper,tilelang-seesaw,flash_mla",
                       out=str(tmp_path / "out"))
    assert plan.files == ("kernels/mla_decode.py", "kernels/mla_decode_seesaw.py")


def test_a_paged_batch_of_the_seesaw_runs_the_seesaw_over_pages(monkeypatch):
    """A paged workload case of tilelang-seesaw runs the seesaw's own config at the batch's mean length, on the
    balanced schedule (mla_decode.paged_config): the seesaw over pages."""
    import torch

    from mlagate.kernels import mla_decode_paged
    from mlagate.measure import impls

    compiled = []
    shape = mla_decode_paged.PagedShape(batch=2, heads=16, max_pages=2, page_size=64)
    monkeypatch.setattr(mla_decode_paged, "check_paged_inputs", lambda *paged: shape)
    monkeypatch.setattr(mla_decode_paged, "compiled", lambda *args, **kwargs: compiled.append(args))
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(impls, "_require_arch", lambda *args, **kwargs: None)
    paged = impls.Paged(torch.zeros(2, 16, 512), torch.zeros(2, 16, 64), torch.zeros(4, 64, 512),
                        torch.zeros(4, 64, 64), torch.arange(4, dtype=torch.int32).view(2, 2),
                        torch.full((2,), 100, dtype=torch.int32))
    impls.prepare("tilelang-seesaw", paged, "cpu")
    mean = shape.at_mean_length([100, 100])
    seesaw = impls.tilelang_config("tilelang-seesaw", mean, "sm_90").with_(num_split=0)
    assert seesaw.schedule == "seesaw" and compiled == [(shape, seesaw, "cpu", [100, 100])]


@pytest.mark.parametrize("seqlen, schedule", [(1, "pipelined"), (64, "pipelined"), (65, "seesaw"),
                                              (4096, "seesaw")])
def test_a_cache_of_one_tile_or_less_runs_the_pipelined_kernel(seqlen, schedule):
    assert m.plan(m.Shape(batch=2, seqlen=seqlen), m.SEESAW, "sm_90").config.schedule == schedule


@pytest.mark.parametrize("batch, seqlen, heads, want_split, want_len", [
    (64, 4096, 16, 2, 2048),    # 64 blocks of 64-row tiles (16 real heads): two splits fill 132 SMs
    (128, 4096, 128, 1, 4096),  # 256 blocks: no split
    (5, 4097, 128, 11, 384),    # splits are whole pairs of 64-token tiles
])
def test_splits_are_whole_pairs_of_tiles(batch, seqlen, heads, want_split, want_len):
    p = m.plan(m.Shape(batch=batch, seqlen=seqlen, heads=heads), m.SEESAW, "sm_90")
    assert (p.num_split, p.split_len, p.split_len % 128) == (want_split, want_len, 0)


SOURCE_SHAPE = m.Shape(batch=7, seqlen=30001, heads=16)  # split, masked, several pairs per split


@pytest.fixture(scope="module")
def source():
    """The split kernel at TP8's 16 heads, fp16, with a masked tail (odd seqlen) and 8 pairs per split."""
    return m.lower(SOURCE_SHAPE, m.SEESAW, "sm_90a")


def decode_body(text: str) -> str:
    return split_kernels(text)["main_split_kernel"][1]  # the decode kernel (main_split_kernel_1 combines)


def warpgroups(text: str) -> tuple:
    """The decode kernel's two warpgroup branches: `if (threadIdx.x < 128) { ... } else { ... }`."""
    body = decode_body(text)
    start = body.index("if (((int)threadIdx.x) < 128) {\n")
    split = re.search(r"\n  \} else \{\n", body[start:]).start() + start
    return body[start:split], body[split:]


@pytest.mark.slow
def test_each_warpgroup_computes_its_own_softmax_and_products(source):
    """Both warpgroups keep their fragments: one fragment shared by the two branches gives each only half its
    threads, and TileLang then dropped the odd warpgroup's softmax from the source altogether."""
    even, odd = warpgroups(source)
    for branch, rescale in ((even, "rescale_0"), (odd, "rescale_1")):
        assert "exp2f(" in branch and "wgmma" in branch
        assert re.search(rf"\(\(float\*\){rescale}\)\[[^\]]+\] = ", branch), f"{rescale} is never written"


@pytest.mark.slow
def test_kv_tiles_arrive_by_tma_and_the_two_warpgroups_sync_apart(source):
    even, odd = warpgroups(source)
    assert "tma_load(KV_desc" in even and "tma_load(KV_desc" in odd
    ids = {branch: set(re.findall(r"__sync_thread_partial\((\d+), 128\)", branch)) for branch in (even, odd)}
    assert ids[even] and ids[odd] and not ids[even] & ids[odd]


def pair_loop(branch: str) -> str:
    """A warpgroup's branch from its loop over pairs on (`for (int k = 0; k < ...` or `k_1`)."""
    return branch[re.search(r"for \(int (k(?:_\d+)?) = 0; \1 < ", branch).start():]


def next_pair_waits(branch: str) -> list:
    """The barriers a warpgroup's pair loop waits on for the next pair's tiles (parity (k + 1) & 1), in order,
    once each."""
    loop = pair_loop(branch)
    waits = re.findall(r"(k[01]_(?:l|r|pe)_ready)\[[^\]]*\]\.wait\(\(\(k(?:_\d+)? \+ 1\) & 1\)\)", loop)
    return list(dict.fromkeys(waits))


@pytest.mark.slow
def test_each_warpgroup_scores_the_next_pair_in_the_order_its_tiles_land(source):
    """Warpgroup 0 requests K0_l and K0_pe itself, early, and scores them before K0_r, which warpgroup 1 requests
    only after its P0 V0_r; warpgroup 1 scores its own early K1_r first. With both scoring left, right, pe, each
    one's largest stall was its wait for the late half (ncu on the H200, docs/measurements.md, seventh session).
    Warpgroup 0 waits for P1 V1_l (one group behind its 4 + 1 score groups) before K1_l is reloaded."""
    assert m.plan(SOURCE_SHAPE, m.SEESAW, "sm_90a").split_len > m.SEESAW.block_N, "the fixture must loop over pairs"
    even, odd = warpgroups(source)
    assert next_pair_waits(even) == ["k0_l_ready", "k0_pe_ready", "k0_r_ready"]
    assert next_pair_waits(odd) == ["k1_r_ready", "k1_l_ready", "k1_pe_ready"]
    k0_pe_load = "tma_load(K_pe_desc, k0_pe_ready[0]"
    assert k0_pe_load in pair_loop(even) and k0_pe_load not in pair_loop(odd)
    assert "wait_wgmma<5>();" in pair_loop(even)


def test_a_build_of_the_seesaw_for_a_gpu_it_cannot_run_on_is_refused(tmp_path, capsys):
    from mlagate.cli import main

    out = tmp_path / "build"
    assert main(["build", "--grid", "quick", "--target", "hip:gfx942", "--config-name", "seesaw",
                 "--out", str(out)]) == 2
    assert "--config-name seesaw: the seesaw schedule does not build for hip:gfx942" in capsys.readouterr().err
    assert not out.exists()


def test_the_re_measure_builds_each_commits_own_seesaw(kernel_commits):
    """A re-measure builds base's and head's seesaw from their own commits, each on its own commit's dense file;
    building today's for both would read any change to the seesaw as none."""
    import sys

    from mlagate.measure import interleaved

    marks = {"mla_decode.py": "dense", "mla_decode_seesaw.py": "seesaw"}
    base = kernel_commits({name: f"base {mark}" for name, mark in marks.items()})
    head = kernel_commits({name: f"head {mark}" for name, mark in marks.items()})
    for commit, side in ((base, "base"), (head, "head")):
        dense = interleaved.kernel_module_at(kernel_commits.repo, commit)
        seesaw = dense.schedule_module("seesaw")
        assert (dense.MARK, seesaw.MARK) == (f"{side} dense", f"{side} seesaw")
        assert seesaw.mla_decode is dense
    assert m.schedule_module("seesaw") is sys.modules["mlagate.kernels.mla_decode_seesaw"]
    assert sys.modules["mlagate.kernels.mla_decode"] is m


def test_a_commit_that_imports_the_seesaw_by_name_is_not_re_measured():
    """Before SCHEDULE_MODULES, mla_decode.py imported the seesaw module by name when it built a kernel: at such a
    commit the re-measure would build today's seesaw, so it refuses; its pipelined kernels are re-measured."""
    import types

    from mlagate.measure import interleaved

    older = types.SimpleNamespace()
    with pytest.raises(interleaved.ConfirmError, match=r"kernels/mla_decode.py at aaaaaaaaaaaa builds the seesaw "
                                                       r"schedule from whatever module is installed"):
        interleaved.check_buildable(older, m.SEESAW, "a" * 40)
    interleaved.check_buildable(older, m.HOPPER, "a" * 40)
    interleaved.check_buildable(m, m.SEESAW, "a" * 40)


@pytest.mark.slow
def test_the_ladders_patched_seesaw_lowers_with_its_spin_and_other_shapes_unchanged(source, tmp_path, monkeypatch):
    """A step commit's seesaw file, as the re-measure and asv import it: the listed shape's kernel spins its cycles
    at the start of the block; any other shape lowers to the very source base lowers."""
    import importlib.util

    from mlagate.ladder import rules as ladder

    base = (Path(m.__file__).parent / "mla_decode_seesaw.py").read_text()
    listed = m.Shape(batch=64, seqlen=4096, heads=16)
    text = ladder.patched(base, 3, {("seesaw", 64, 4096, 16, "float16", 1): 12345}, "run1", ladder.SEESAW_FILE)
    file = tmp_path / "mla_decode_seesaw_ladder_step.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(m.schedule_modules, "seesaw", module)
    spun = decode_body(m.lower(listed, m.SEESAW, "sm_90a"))
    assert "clock64()" in spun and "12345" in spun
    assert spun.index("clock64()") < spun.index("tma_load")  # before the block's first load
    assert m.lower(SOURCE_SHAPE, m.SEESAW, "sm_90a") == source
    assert "clock64" not in source


def test_the_ladder_has_a_patch_for_every_schedule():
    from mlagate.ladder import rules as ladder

    assert set(ladder.SCHEDULES) == set(m.SCHEDULES)
    for schedule, (path, _) in ladder.SCHEDULES.items():
        assert path == (ladder.DENSE_FILE if schedule == "pipelined" else f"kernels/{m.SCHEDULE_MODULES[schedule]}.py")


def test_a_commit_whose_seesaw_does_not_load_is_not_cached_half_loaded(kernel_commits):
    """A commit whose seesaw file fails to import fails each re-measure alike: its dense module is not kept
    without a seesaw of its own (the next call would build today's)."""
    from mlagate.measure import interleaved

    broken = kernel_commits({}, {"mla_decode_seesaw.py": "\nraise ImportError('broken at this commit')\n"})
    for _ in range(2):
        with pytest.raises(ImportError, match="broken at this commit"):
            interleaved.kernel_module_at(kernel_commits.repo, broken)


@pytest.mark.parametrize("impl", ["tilelang-seesaw", "tilelang-hopper"])
def test_the_re_measure_runs_a_paged_case_with_the_commits_own_paged_rule(kernel_commits, impl):
    """A commit's paged config as the re-measure reads it: its own rule (paged_config) over its own table, for every
    family, as impls.paged_config does today: the seesaw over pages, and hopper's tuned entry on the balanced
    schedule (its quick-grid shapes are tuned: threads and policy differ from HOPPER's)."""
    from mlagate.case import Case
    from mlagate.measure import impls, interleaved

    commit = kernel_commits({"mla_decode.py": "head"})
    module = interleaved.kernel_module_at(kernel_commits.repo, commit)
    case = Case(impl, 64, 4096, "float16", 16, workload="uniform-paged@x", page_size=64, lengths=(4096,) * 64)
    config = interleaved.case_config_at(kernel_commits.repo, commit, module, case, "sm_90")
    today = impls.paged_config(impl, m.Shape(batch=64, seqlen=4096, heads=16), "sm_90")
    assert config.name == impl.removeprefix("tilelang-") and config.num_split == 0
    assert dataclasses.asdict(config) == dataclasses.asdict(today)
    if impl == "tilelang-hopper":
        assert config.threads != module.HOPPER.threads  # the tuned entry, not the default
    dense = dataclasses.replace(case, workload="dense", lengths=())
    assert interleaved.case_config_at(kernel_commits.repo, commit, module, dense, "sm_90").schedule == \
        ("seesaw" if impl == "tilelang-seesaw" else "pipelined")


def test_a_ladder_over_a_seesaw_cache_of_one_tile_is_refused_naming_the_grid(tmp_path):
    """There mla_decode.plan runs the pipelined kernel, which the seesaw file's spin never reaches: calibration
    would only fail later on the GPU ("added no time")."""
    from mlagate.ladder import run as ladder

    cfg = config.load()
    grid = dataclasses.replace(cfg.grid, sizes={**cfg.grid.sizes, "tiny": ((64,), (64,), (16,), (1,))},
                               workloads={**cfg.grid.workloads, "tiny": ()})
    gated = dataclasses.replace(cfg, grid=grid, gate=dataclasses.replace(cfg.gate, gated=("tilelang-seesaw",)))
    with pytest.raises(ValueError,
                       match=r"^--grid tiny: tilelang-seesaw h=16 b=64 s=64 float16 runs another schedule's kernel"):
        ladder.plan(gated, base_rev="HEAD", grid="tiny", impls="tilelang-seesaw,flash_mla", out=str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("removed, workload, message", [
    ("SCHEDULE_MODULES", "dense", "builds the seesaw schedule from whatever module is installed"),
    ("paged_config", "uniform-paged@x", "has no paged kernel for the seesaw schedule")])
def test_the_re_measure_refuses_a_commit_that_cannot_build_its_own_seesaw_case(kernel_commits, removed, workload,
                                                                               message):
    """case_config_at's guards, on a commit whose kernel file lacks what they look for (as older commits do)."""
    from mlagate.case import Case
    from mlagate.measure import interleaved

    commit = kernel_commits({}, {"mla_decode.py": f"\ndel {removed}\n"})
    module = interleaved.kernel_module_at(kernel_commits.repo, commit)
    lengths = (4096,) * 64 if workload != "dense" else ()
    case = Case("tilelang-seesaw", 64, 4096, "float16", 16, workload=workload, page_size=64, lengths=lengths)
    with pytest.raises(interleaved.ConfirmError, match=message):
        interleaved.case_config_at(kernel_commits.repo, commit, module, case, "sm_90")


@pytest.mark.parametrize("lengths, merged", [([100, 100], [-1]),    # nothing split: the sentinel, never an empty grid
                                             ([100, 60000], [1])])   # the long one in pieces: it alone
def test_the_seesaw_over_pages_launches_its_combine_over_split_sequences_only(lengths, merged):
    """CompiledPagedDecode.batch hands the seesaw's combine ``Merged``: the sequences in pieces, or [-1] when none
    is (a zero-size grid does not launch); the pipelined balanced kernel's combine merges every sequence and takes
    no such argument. Built without compiling: batch() reads the plan alone."""
    from mlagate.kernels import mla_decode_paged as paged

    shape = paged.PagedShape(batch=2, heads=16, max_pages=1024, page_size=64)
    launched = {}
    for tile_config in (m.SEESAW, m.HOPPER.with_(num_split=0)):
        kernel = object.__new__(paged.CompiledPagedDecode)
        kernel.plan = paged.plan(shape, tile_config, "sm_90")
        launched[kernel.plan.config.schedule] = kernel.batch(kernel.schedule(lengths), "cpu")
    seesaw, pipelined = launched["seesaw"], launched["pipelined"]
    assert seesaw[3].tolist() == merged
    assert [t.dtype for t in pipelined] == [seesaw[i].dtype for i in (0, 1, 2, 4, 5)]  # no Merged

"""Re-measure flagged cases with base and head interleaved in one process.

Both commits' kernel files (and tuned tables) are loaded side by side (``git show``, then imported
under distinct names) and timed in alternating rounds (A B, B A, ...) on the
same GPU, with the same inputs, through the record's own timing function (the
``confirm`` budget per side and round), for as many rounds as the caller's rule asks (the gate's:
decide/remeasure.py, a budget of rounds and seconds). Run-to-run effects (clocks, another tenant, a
bimodal boost state) hit both sides alike, so what remains is the code change.
"""

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch

from mlagate.case import Case
from mlagate.config import Timing
from mlagate.gitops import GitError, git
from mlagate.kernels import mla_decode, tuned
from mlagate.measure.environment import device as gpu
from mlagate.measure.harness import Inputs, check_output
from mlagate.measure.impls import TILELANG_PREFIX
from mlagate.measure.layouts import split_scale
from mlagate.measure.timer import time_gpu

KERNEL_FILE = "kernels/mla_decode.py"
PAGED_KERNEL_FILE = "kernels/mla_decode_paged.py"  # imports the dense file's tiles and attend body


class ConfirmError(Exception):
    pass


def kernel_module_at(repo, commit, path=KERNEL_FILE):
    """A kernel file as it was at ``commit``, imported as its own module. The paged kernel imports the
    dense one: it gets the dense file of the same commit, so a change to either is measured."""
    name = f"{Path(path).stem}_at_{commit[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        source = git("show", f"{commit}:{path}", repo=repo)
    except GitError as e:
        raise ConfirmError(f"cannot read {path} at {commit}: {e}") from None
    dense = kernel_module_at(repo, commit) if path != KERNEL_FILE else None
    file = Path(tempfile.mkdtemp(prefix="mlagate-confirm-")) / f"{name}.py"
    file.write_text(source + "\n")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    package, today = sys.modules["mlagate.kernels"], mla_decode
    try:
        try:
            if dense is not None:  # `from mlagate.kernels import mla_decode` reads both of these
                sys.modules["mlagate.kernels.mla_decode"] = package.mla_decode = dense
            spec.loader.exec_module(module)
        finally:
            sys.modules["mlagate.kernels.mla_decode"] = package.mla_decode = today
        for schedule, stem in getattr(module, "SCHEDULE_MODULES", {}).items():  # the dense file's other schedules
            module.schedule_modules[schedule] = kernel_module_at(repo, commit, f"kernels/{stem}.py")
    except BaseException:  # half a module (no seesaw of its own) must not be found by the next call
        sys.modules.pop(name, None)
        raise
    return module


def check_buildable(module, config, commit):
    """A config of another schedule than the pipelined one is built by a module the dense file names in
    SCHEDULE_MODULES (since that table exists): an older file imports it by name at build time, which would
    build today's kernel for that commit and read a change to it as none."""
    if config.schedule != "pipelined" and not hasattr(module, "SCHEDULE_MODULES"):
        raise ConfirmError(f"{KERNEL_FILE} at {commit[:12]} builds the {config.schedule} schedule from whatever "
                           "module is installed, not its own commit's: it cannot be re-measured as it was")


def config_at(repo, commit, module, family: str, shape, arch: str):
    """The tile config ``commit`` runs ``family`` with on ``shape``: its tuned table's entry (read with
    today's parser, rebuilt on that commit's own TileConfig), else its family default."""
    default = module.CONFIGS[family]
    path = f"kernels/tuned/{tuned.table_path(arch).name}"
    try:  # ls-tree: an absent path prints nothing, a missing commit is an error
        present = git("ls-tree", "--name-only", commit, "--", path, repo=repo)
        text = git("show", f"{commit}:{path}", repo=repo, strip=False) if present else None
    except GitError as e:
        raise ConfirmError(f"cannot read {path} at {commit}: {e}") from None
    if text is None:
        return default  # no table at that commit: every shape ran the default
    try:
        table = tuned.parse_table(text, arch, f"{path} at {commit[:12]}")
    except ValueError as e:
        raise ConfirmError(str(e)) from None
    entry = table.get(family, {}).get(tuned.shape_key(shape))
    return default.with_(**{f: getattr(entry.config, f) for f in tuned.TUNABLE}) if entry else default


def dense_shape(module, case: Case):
    """``module``'s (a commit's kernel file) Shape of ``case``: s_q only past one query token and kv_dtype only for a
    cache in another dtype than the query's, so a commit from before those axes still builds its other cases."""
    extra = {"s_q": case.q_len} if case.q_len != 1 else {}
    extra.update({"kv_dtype": case.kv_dtype} if case.kv_dtype != case.dtype else {})
    return module.Shape(batch=case.batch, seqlen=case.seqlen, heads=case.heads, dtype=case.dtype, **extra)


def case_config_at(repo, commit, module, case: Case, arch: str):
    """The tile config ``commit`` (``module``: its kernel file) runs ``case`` with: its family's at the case's
    (mean) length, and for a paged batch the paged kernel's for that, by the commit's own rule and table."""
    shape = dense_shape(module, case)
    config = config_at(repo, commit, module, case.impl[len(TILELANG_PREFIX):], shape, arch)
    if case.paged and hasattr(module, "paged_config"):
        config = module.paged_config(config, lambda family: config_at(repo, commit, module, family, shape, arch))
    elif case.paged and config.schedule != "pipelined":
        raise ConfirmError(f"{case.label()}: {KERNEL_FILE} at {commit[:12]} has no paged kernel for the "
                           f"{config.schedule} schedule")
    check_buildable(module, config, commit)
    return config


def compile_at(item) -> None:
    """In a compiling process (measure.precompile.in_processes): ``(repo, commit, case)``'s dense TileLang kernel
    as launch_at builds it, into TileLang's disk cache, so launch_at loads it instead of compiling it."""
    repo, commit, case = item
    module = kernel_module_at(repo, commit)
    config = case_config_at(repo, commit, module, case, mla_decode.device_arch(gpu()))
    module.compiled(dense_shape(module, case), config)


def compile_ahead(repo, commits: list, cases, echo=print):
    """compile_at for each dense case of ``cases`` at each of ``commits``, in parallel processes: launch_at then
    loads each kernel from TileLang's disk cache (one after another, each took ~10 s). Only a head start: a
    failure here is a line, the launch reports its own."""
    from mlagate.measure import precompile

    items = [(repo, commit, case) for commit in commits for case in cases if not case.paged]
    start = time.monotonic()
    failed = [f"{case.label()} at {commit[:10]}: {precompile.failure(outcome)}"
              for (_, commit, case), outcome in precompile.in_processes(compile_at, items, precompile.default_jobs())
              if isinstance(outcome, Exception)]
    echo(f"compiled {len(items) - len(failed)} of {len(items)} kernels in parallel ({time.monotonic() - start:.0f} s)"
         + "".join(f"\n  failed: {line}" for line in failed))


def launch_at(repo, commit, case: Case, inputs: Inputs):
    """The checked launch of ``case``'s TileLang kernel as ``commit`` has it: kernel file and tuned table."""
    module = kernel_module_at(repo, commit)
    tensors, kv_scale = split_scale(inputs.tensors)
    tensors = tuple(tensors)[:6]
    q = tensors[0]
    # an fp8 cache's scale: the checks take the float, the compiled kernels a float32 [1] on the device
    checked, scaled = ((), {}) if kv_scale is None else ((kv_scale,), {"kv_scale": module.scale_tensor(kv_scale,
                                                                                                        q.device)})
    shape = dense_shape(module, case)
    config = case_config_at(repo, commit, module, case, mla_decode.device_arch(q.device))
    if case.paged:  # the config the dense kernel runs at the batch's mean length, as impls does
        paged = kernel_module_at(repo, commit, PAGED_KERNEL_FILE)
        kernel = paged.compiled(paged.check_paged_inputs(*tensors, *checked), config, lengths=case.lengths)
    else:
        kernel = module.compiled(shape, config)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)

    def launch():
        kernel(*tensors, out, lse, **scaled)
        return out

    check_output(launch(), inputs.expected)
    return launch


def alternate(launches: dict, timing: Timing, rounds: int, budget: str = "confirm", device=None) -> dict:
    """{name: samples in seconds}: each launch timed once per round under ``budget``, the
    order alternating round by round (A B, B A, ...), so drift hits every side alike."""
    per_round = alternate_until(launches, timing, lambda done, _: len(done[next(iter(done))]) >= rounds, budget,
                                device)
    return {name: tuple(t for r in v for t in r) for name, v in per_round.items()}


def alternate_until(launches: dict, timing: Timing, enough, budget: str = "confirm", device=None,
                    clock=time.monotonic, started=None) -> dict:
    """{name: (round's samples in seconds, ...)}: rounds as ``alternate`` times them, until ``enough({name:
    rounds so far}, seconds since ``started``)`` is true (asked before every round; the gate's rule is
    decide/remeasure.stop_rule). ``clock``: seconds (a test's fake); ``started``: its reading at the start."""
    names = list(launches)
    rounds = {name: [] for name in names}
    started = clock() if started is None else started
    r = 0
    while not enough({name: tuple(v) for name, v in rounds.items()}, clock() - started):
        for name in (names if r % 2 == 0 else names[::-1]):
            s = time_gpu(launches[name], timing, budget, device=device)
            rounds[name].append(tuple(t / 1e3 for t in s.times_ms))
        r += 1
    return {name: tuple(v) for name, v in rounds.items()}


def interleaved(cases, repo, base_commit, head_commit, timing: Timing, rounds: int) -> dict:
    """{case key: (base samples, head samples)} in seconds, for TileLang cases: ``rounds`` rounds each."""
    per_round = interleaved_until(cases, repo, base_commit, head_commit, timing,
                                  lambda case: lambda done, _: len(done["base"]) >= rounds)
    return {key: tuple(tuple(t for r in side for t in r) for side in sides) for key, sides in per_round.items()}


def interleaved_until(cases, repo, base_commit, head_commit, timing: Timing, stop_for, clock=time.monotonic) -> dict:
    """{case key: (base rounds, head rounds)}, each round a tuple of samples in seconds, for TileLang cases;
    ``stop_for(case)`` gives the case's ``enough`` (alternate_until), its seconds counted from this call on, over
    every case together (the PR's budget; compiles included)."""
    device, started = gpu(), clock()
    results = {}
    for case in cases:
        if not case.impl.startswith(TILELANG_PREFIX):
            raise ConfirmError(f"{case.label()}: only TileLang kernels change between commits")
        inputs = Inputs(case, device)
        sides = alternate_until({"base": launch_at(repo, base_commit, case, inputs),
                                 "head": launch_at(repo, head_commit, case, inputs)},
                                timing, stop_for(case), device=device, clock=clock, started=started)
        results[case.key] = (sides["base"], sides["head"])
        del inputs
        torch.cuda.empty_cache()
    return results

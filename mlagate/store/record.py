"""Record one commit: run asv on it and store what asv cannot hold beside it.

``asv run --python=same --set-commit-hash C --machine M --record-samples`` on an
``existing`` environment: asv neither builds nor installs, it runs the
benchmarks of the source tree it is pointed at. For a commit other than the
checked-out one, that tree is a git worktree of the commit.

A record refuses to start without a GPU (its results would all be skipped, and
the append-only store would keep them). It holds the store's lock from start to
finish and works in a private tree under ``<repo>/.asv/records``: asv writes its
results into a staging results directory there, the run's environment (GPU,
clocks, versions) and asv's log go beside them as sidecars, and only when all of
that succeeded does ``files.install_record`` move the new files into the store,
all or nothing. A commit already recorded on this machine is refused.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlagate import gitops
from mlagate.gitops import git, resolve
from mlagate.measure import asv_one_process, environment, kernels_run
from mlagate.measure.asv_suite import CASES_ENV, DEADLINE_ENV, GPUS_ENV, SHARD_ENV
from mlagate.measure.grid import parse_gpus
from mlagate.measure.shards import parse_shard
from mlagate.store.errors import StoreError
from mlagate.store.files import install_record, recover, store_lock
from mlagate.store.results import Store, refuse_recorded


def _is_checked_out(commit: str, repo) -> bool:
    return resolve("HEAD", repo) == commit and not git("status", "--porcelain", "--untracked-files=no", repo=repo)


def gpu_available() -> bool:
    """torch's answer in the recording process. A function of its own so that a CPU test can
    stand in for it: it runs here, before asv starts, so nothing in asv needs a test switch."""
    import torch

    return torch.cuda.is_available()


def asv_config(source: Path, results: Path, html: Path) -> dict:
    conf = json.loads((source / "asv.conf.json").read_text())
    conf.update(repo=str(gitops.repository()), benchmark_dir=str(source / "benchmarks"), results_dir=str(results),
                html_dir=str(html))
    return conf


def record(rev: str, *, results: Path, machine: str, grid: str = "full", dtypes=None, impls=None,
           bench_regex: str | None = None, time_budget_s: float | None = None, gpus: str | None = None,
           shard: str | None = None, gpu_check: dict | None = None, echo=print) -> Path:
    """Record ``rev`` into the store at ``results``; returns the asv results file. Cases not
    started within ``time_budget_s`` of the start are stored as skipped, saying why. ``gpus``
    (as `--gpus` takes it) shards the grid points over this host's GPUs; ``shard`` ('I/N')
    records only this runner's share of the points (`mlagate results merge` joins the shares);
    ``gpu_check`` (`mlagate.gpu_check`) is kept in the environment record."""
    results = Path(results).resolve()  # asv reads a relative results_dir against its config file's folder
    if not gpu_available():
        raise ValueError(f"no GPU: torch.cuda.is_available() is False in this process; mlagate record measures "
                         f"on a CUDA or ROCm GPU and stored nothing in {results}")
    parse_gpus(gpus)  # bad values are refused before anything starts
    if shard:
        parse_shard(shard)
    commit = resolve(rev)
    refuse_recorded(results, machine, commit)  # before the lock: a refusal writes nothing
    with store_lock(results, echo=echo):
        recover(results)
        _remove_dead_trees(results)
        refuse_recorded(results, machine, commit)  # again: a record we waited for may have stored it
        tree = Path(tempfile.mkdtemp(prefix=_tree_prefix(results), dir=_trees()))
        try:
            deadline = time.time() + time_budget_s if time_budget_s else None
            staging = _run_asv(tree, commit, machine, grid, dtypes, impls, bench_regex, deadline, gpus, shard,
                               gpu_check, echo)
            return install_record(staging, results, machine)
        finally:
            _remove_tree(tree)


# -- the record's private tree ------------------------------------------------------

def _trees() -> Path:
    """Where records work: a fixed place beside the repository (ignored by git), not in the
    store (asv walks every folder under a results directory) and not a per-container /tmp, so
    that the next record finds what a killed one left."""
    path = gitops.repository() / ".asv" / "records"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _tree_prefix(results: Path) -> str:
    return f"mlagate-record-{hashlib.sha1(str(results).encode()).hexdigest()[:10]}-"


def _remove_dead_trees(results: Path):
    """Trees of this store's earlier records. Called with the store lock held, so their records
    are over: a live one would hold the lock. Then drop the git worktrees they registered."""
    for tree in _trees().glob(_tree_prefix(results) + "*"):
        shutil.rmtree(tree, ignore_errors=True)
    git("worktree", "prune")


def _remove_tree(tree: Path):
    shutil.rmtree(tree, ignore_errors=True)
    git("worktree", "prune")  # unregisters the commit's worktree, if the record made one


# -- asv ---------------------------------------------------------------------------

def _run_asv(tree: Path, commit, machine, grid, dtypes, impls, bench_regex, deadline, gpus, shard, gpu_check,
             echo) -> Path:
    """asv and the sidecars, into the staging results directory ``tree/results``; returns it."""
    source = gitops.repository()
    if not _is_checked_out(commit, source):
        source = tree / "src"
        git("worktree", "add", "--detach", str(source), commit)
    staging = tree / "results"
    conf_path = tree / "asv.conf.json"
    conf_path.write_text(json.dumps(asv_config(source, staging, tree / "html"), indent=1))
    env = _asv_env(source, grid, dtypes, impls)
    cases_file = tree / "cases.json"
    env[CASES_ENV] = str(cases_file)
    for name, value in ((DEADLINE_ENV, deadline and repr(deadline)), (GPUS_ENV, gpus), (SHARD_ENV, shard)):
        if value:
            env[name] = value
    asv = [sys.executable, "-m", "asv"]
    out = subprocess.run([*asv, "machine", "--machine", machine, "--yes", "--config", str(conf_path)], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"asv machine --machine {machine} failed: {(out.stderr or out.stdout).strip()[-2000:]}")
    start = environment.environment(commit=commit)
    # asv's run command, every case in one process that imports the suite once (asv_one_process)
    cmd = [sys.executable, asv_one_process.SCRIPT, "asv", "run", "--python=same", "--set-commit-hash", commit,
           "--machine", machine, "--record-samples", "--show-stderr", "--config", str(conf_path)]
    if bench_regex:
        cmd += ["--bench", bench_regex]
    code, log = _stream(cmd, env, source, echo)
    end = environment.environment(commit=commit)
    staged = Store(staging)
    if staged.load(machine, commit) is None:
        raise StoreError(f"asv wrote no results for {commit[:8]} (exit code {code}; its log is above); "
                         "nothing was stored")
    staged.write_sidecar(machine, commit, "asv-log", {"command": cmd, "exit_code": code, "log": log[-200_000:]})
    cases = json.loads(cases_file.read_text()) if cases_file.exists() else None  # none: a commit from before
    if cases is not None:  # the vendor kernels that ran, beside their versions (one measurement per record)
        start["vendors"] = kernels_run.by_row(cases["results"], start["vendors"])
        for line in cases.get("said", ()):  # the compile's summary and where the measuring pass's time went
            echo(line)
    staged.write_sidecar(machine, commit, "env", {"start": start, "end": end, "grid": grid, "dtypes": dtypes,
                                                  "impls": impls, "platform": start["platform"], "gpus": gpus,
                                                  "shard": shard, "gpu_consistency": gpu_check})
    if cases is not None:
        staged.write_sidecar(machine, commit, "cases", cases)
    return staging


def _asv_env(source: Path, grid, dtypes, impls) -> dict:
    env = dict(os.environ)
    # asv drops PYTHONPATH for benchmark processes unless given as ASV_PYTHONPATH.
    env["ASV_PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH", "")) if p)
    env["MLAGATE_CONFIG"] = str(source / "perf.yml")
    env["MLAGATE_GRID"] = grid
    if dtypes:
        env["MLAGATE_DTYPES"] = ",".join(dtypes)
    if impls:
        env["MLAGATE_IMPLS"] = ",".join(impls)
    return env


def _stream(cmd, env, cwd, echo) -> tuple:
    """Run cmd, echoing its output as it comes; (exit code, output)."""
    echo(f"$ {' '.join(cmd)}")
    log = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=cwd) as proc:
        for line in proc.stdout:
            log.append(line)
            echo(line.rstrip())
    return proc.returncode, "".join(log)

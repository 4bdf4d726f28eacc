"""Record one commit: run asv on it and store what asv cannot hold beside it.

``asv run --python=same --set-commit-hash C --machine M --record-samples`` on an
``existing`` environment: asv neither builds nor installs, it runs the
benchmarks of the source tree it is pointed at. For a commit other than the
checked-out one, that tree is a temporary git worktree of the commit. The
run's environment (GPU, clocks before and after, versions) and asv's log are
written as sidecars. A commit already recorded on this machine is refused:
the store is append-only.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mlagate import measure
from mlagate.config import ROOT
from mlagate.store import Store, StoreError

REPO = ROOT


def git(*args, repo=REPO) -> str:
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def resolve(rev: str, repo=REPO) -> str:
    return git("rev-parse", "--verify", f"{rev}^{{commit}}", repo=repo)


def _is_checked_out(commit: str, repo) -> bool:
    return resolve("HEAD", repo) == commit and not git("status", "--porcelain", "--untracked-files=no", repo=repo)


def asv_config(source: Path, results: Path, html: Path) -> dict:
    conf = json.loads((source / "asv.conf.json").read_text())
    conf.update(repo=str(REPO), benchmark_dir=str(source / "benchmarks"), results_dir=str(results),
                html_dir=str(html))
    return conf


def record(rev: str, *, results: Path, machine: str, grid: str = "full", dtypes=None, impls=None,
           bench_regex: str | None = None, echo=print) -> Path:
    """Record ``rev`` into the store at ``results``; returns the asv results file."""
    commit = resolve(rev)
    results = Path(results).resolve()  # asv reads a relative results_dir against its config file's folder
    store = Store(results)
    if store.load(machine, commit) is not None:
        raise StoreError(f"{results / machine}: {commit[:8]} is already recorded on '{machine}'; "
                         "the store is append-only (record a new commit)")
    workdir = Path(tempfile.mkdtemp(prefix="mlagate-record-"))
    try:
        source = REPO
        if not _is_checked_out(commit, REPO):
            source = workdir / "src"
            git("worktree", "add", "--detach", str(source), commit)
        conf_path = workdir / "asv.conf.json"
        conf_path.write_text(json.dumps(asv_config(source, results, workdir / "html"), indent=1))
        env = dict(os.environ)
        # asv drops PYTHONPATH for benchmark processes unless given as ASV_PYTHONPATH.
        env["ASV_PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH", "")) if p)
        env["MLAGATE_CONFIG"] = str(source / "perf.yml")
        env["MLAGATE_GRID"] = grid
        if dtypes:
            env["MLAGATE_DTYPES"] = ",".join(dtypes)
        if impls:
            env["MLAGATE_IMPLS"] = ",".join(impls)
        asv = [sys.executable, "-m", "asv"]
        subprocess.run([*asv, "machine", "--machine", machine, "--yes", "--config", str(conf_path)], env=env,
                       check=True, capture_output=True)
        start = measure.environment()
        # forkserver: asv imports the suite once and forks a process per case (asv_suite.preload).
        cmd = [*asv, "run", "--python=same", "--set-commit-hash", commit, "--machine", machine, "--record-samples",
               "--launch-method", "forkserver", "--show-stderr", "--config", str(conf_path)]
        if bench_regex:
            cmd += ["--bench", bench_regex]
        echo(f"$ {' '.join(cmd)}")
        log = []
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=source) as proc:
            for line in proc.stdout:
                log.append(line)
                echo(line.rstrip())
        end = measure.environment()
        store.write_sidecar(machine, commit, "asv-log", {"command": cmd, "exit_code": proc.returncode,
                                                          "log": "".join(log)[-200_000:]})
        store.write_sidecar(machine, commit, "env", {"start": start, "end": end, "grid": grid, "dtypes": dtypes,
                                                     "impls": impls, "platform": start["platform"]})
        found = store.load(machine, commit)
        if found is None:
            raise StoreError(f"asv wrote no results for {commit[:8]} under {results / machine} "
                             f"(exit code {proc.returncode}); see the asv-log sidecar")
        return Path(found.paths[0])
    finally:
        if (workdir / "src").exists():
            git("worktree", "remove", "--force", str(workdir / "src"))
        shutil.rmtree(workdir, ignore_errors=True)

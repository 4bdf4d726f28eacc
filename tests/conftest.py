import subprocess
from pathlib import Path

import pytest

from mlagate import gitops
from mlagate.config import ROOT

# Commits resolve in this checkout wherever pytest runs from (mlagate's own default is the working directory's
# repository); tests of that rule set gitops.REPO back to None.
gitops.REPO = ROOT


def pytest_addoption(parser):
    parser.addoption("--require-gpu", action="store_true",
                     help="error out, rather than skip GPU tests, when no GPU is present (for GPU jobs)")


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA or ROCm GPU is visible to torch"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    if config.getoption("--require-gpu"):
        raise pytest.UsageError(f"--require-gpu was given but {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))


@pytest.fixture
def kernel_commits(tmp_path):
    """A git repository of today's kernels/ files and tuned tables: ``commit({"mla_decode.py": "base"})`` commits
    them, each file named there with ``MARK = "base"`` appended (and ``appended``'s text to the files it names),
    and returns the commit's hash."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "kernels").mkdir()

    def commit(marks: dict, appended: dict | None = None) -> str:
        for source in (gitops.REPO / "kernels").glob("*.py"):
            mark = f"\nMARK = {marks[source.name]!r}\n" if source.name in marks else ""
            (tmp_path / "kernels" / source.name).write_text(source.read_text() + mark
                                                             + (appended or {}).get(source.name, ""))
        (tmp_path / "kernels" / "tuned").mkdir(exist_ok=True)
        for table in (gitops.REPO / "kernels" / "tuned").glob("*.yaml"):  # the tuned tables, as committed
            (tmp_path / "kernels" / "tuned" / table.name).write_text(table.read_text())
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false", "commit", "-qm",
            ", ".join(marks.values()) or "no mark")
        return git("rev-parse", "HEAD").strip()

    commit.repo = tmp_path
    return commit


@pytest.fixture(scope="session")
def fresh_clone():
    """``fresh_clone(dest)``: a clone of this repository's HEAD at dest, on a branch named main (the branch
    asv.conf.json names, whatever branch or detached HEAD this checkout is on), committing as a local user."""
    def make(dest: Path) -> Path:
        if not (Path(gitops.REPO) / ".git").exists():
            pytest.skip(f"{gitops.REPO} is not a git checkout (mutmut's copy of the tree): this test clones it")
        subprocess.run(["git", "clone", "-q", str(gitops.REPO), str(dest)], check=True)
        for args in (("checkout", "-q", "-B", "main"), ("config", "user.name", "mlagate tests"),
                     ("config", "user.email", "tests@localhost"), ("config", "commit.gpgsign", "false")):
            subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True)
        return dest

    return make


@pytest.fixture
def clone(tmp_path, monkeypatch, fresh_clone):
    """Records run in a fresh clone: a record adds and prunes git worktrees, and this checkout is not the
    tests' to change. HOME: `asv machine` writes ~/.asv-machine.json."""
    repo = fresh_clone(tmp_path / "repo")
    monkeypatch.setattr(gitops, "REPO", repo)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return repo


@pytest.fixture(scope="module")
def browser(pages, tmp_path_factory):
    """(base URL, headless Chromium) on the module's ``pages`` folder, served over HTTP (tests/chromium.py);
    skips with the reason where there is no browser."""
    from chromium import serving

    with serving(pages, tmp_path_factory.mktemp("chromium-profile")) as served:
        yield served

"""The one git runner: every git command mlagate runs goes through :func:`git`."""

import subprocess

from mlagate.config import ROOT

REPO = ROOT  # the repository commits are resolved in; read at each call, so tests can point it at a clone


class GitError(ValueError):
    """A git command failed; the message has the command, the repository and git's own error."""


def git(*args, repo=None, check=True, strip=True) -> str:
    """Run git in ``repo`` (default :data:`REPO`), whoever owns it (a container's checkout
    belongs to another user); its stdout. ``check``: a non-zero exit raises GitError."""
    repo = repo or REPO
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {repo}: {out.stderr.strip()}")
    return out.stdout.strip() if strip else out.stdout


def resolve(rev: str, repo=None) -> str:
    """The full hash of the commit ``rev`` names."""
    return git("rev-parse", "--verify", f"{rev}^{{commit}}", repo=repo)


def head_or_none(repo=None) -> str | None:
    """HEAD's hash, or None where there is no repository (an installed mlagate)."""
    try:
        return resolve("HEAD", repo)
    except (GitError, OSError):
        return None


def is_ancestor(older: str, newer: str, repo=None) -> bool:
    """Whether ``older`` is ``newer`` or one of its ancestors; False also where the clone lacks either."""
    try:  # exit 1: not an ancestor; any other failure (a commit this clone lacks) is no either
        git("merge-base", "--is-ancestor", older, newer, repo=repo)
        return True
    except GitError:
        return False


def file_at(commit: str, path: str, repo=None) -> str | None:
    """``path`` as committed in ``commit`` (never the working tree), or None where the commit has no such
    file; GitError where the clone lacks the commit."""
    git("cat-file", "-e", f"{commit}^{{commit}}", repo=repo)
    if not git("ls-tree", "--name-only", commit, "--", path, repo=repo):
        return None
    return git("show", f"{commit}:{path}", repo=repo, strip=False)

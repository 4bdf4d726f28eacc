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

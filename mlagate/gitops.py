"""The one git runner: every git command mlagate runs goes through :func:`git`."""

import subprocess
from pathlib import Path

# The repository commits are resolved in; None: the one the current directory is in (never mlagate's own
# checkout, which an installed mlagate may not even have). Read at each call, so tests can point it at a clone.
REPO = None


class GitError(ValueError):
    """A git command failed; the message has the command, the repository and git's own error."""


def repository() -> Path:
    """:data:`REPO`, else the top of the git repository the current directory is in; GitError where it is in none."""
    if REPO is not None:
        return Path(REPO)
    here = Path.cwd()
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(here), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise GitError(f"{here} is in no git repository: mlagate resolves revisions (--base, --head, --rev, --bad, "
                       "--good) in the repository you run it from; cd into your clone and run it again")
    return Path(out.stdout.strip())


def git(*args, repo=None, check=True, strip=True) -> str:
    """Run git in ``repo`` (default :func:`repository`), whoever owns it (a container's checkout
    belongs to another user); its stdout. ``check``: a non-zero exit raises GitError."""
    where = repo or repository()
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(where), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {where}: {out.stderr.strip()}")
    return out.stdout.strip() if strip else out.stdout


def resolve(rev: str, repo=None) -> str:
    """The full hash of the commit ``rev`` names; GitError saying where it was looked for and what to try."""
    where = repo or repository()
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", repo=where)
    except GitError:  # git's own "fatal: Needed a single revision" names neither the revision nor the clone
        raise GitError(f"{rev!r} names no commit in {where}: check the spelling, or fetch it "
                       f"(`git -C {where} fetch origin {rev}`; a shallow CI clone needs fetch-depth: 0)") from None


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

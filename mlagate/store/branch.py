"""A git branch as the results store: CI checks it out, records into it, and pushes what
was added. Results files and sidecars are append-only there too: a push that would
modify or delete one is refused. git runs through :func:`mlagate.gitops.git`; a git
failure surfaces as a StoreError naming the worktree."""

import functools
from pathlib import Path

from mlagate.gitops import GitError, git
from mlagate.store.errors import StoreError
from mlagate.store.files import CONTROL, LOCK, REWRITTEN, recover, store_lock


def _git_fails_as_store_error(func):
    """The results branch is the store: a git command that fails under it is a StoreError."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except GitError as e:
            raise StoreError(str(e)) from None
    return wrapper


@_git_fails_as_store_error
def checkout_branch(repo, branch, path, remote="origin") -> Path:
    """A worktree of the results branch at ``path`` (created empty if the
    branch does not exist yet); its results live in ``path/results``."""
    path = Path(path)
    if (path / ".git").exists():
        git("pull", "--ff-only", remote, branch, repo=path, check=False)
        return path
    git("worktree", "prune", repo=repo)  # a reused CI workspace may list a worktree that is gone
    git("fetch", remote, branch, repo=repo, check=False)
    if git("rev-parse", "--verify", "--quiet", f"{remote}/{branch}", repo=repo, check=False):
        git("worktree", "add", "-B", branch, str(path), f"{remote}/{branch}", repo=repo)
    elif git("rev-parse", "--verify", "--quiet", branch, repo=repo, check=False):
        git("worktree", "add", str(path), branch, repo=repo)
    else:  # a new, empty branch (git < 2.42 has no `worktree add --orphan`)
        git("worktree", "add", "--detach", str(path), repo=repo)
        git("checkout", "-q", "--orphan", branch, repo=path)
        git("rm", "-rfq", "--ignore-unmatch", ".", repo=path)
    return path


@_git_fails_as_store_error
def commit_branch(path, message, remote="origin", branch=None, push=True) -> bool:
    """Commit what records added to a results-branch worktree and push. Results files and
    sidecars are append-only: one modified or deleted is refused. benchmarks.json and
    machine.json may change (asv rewrites them on every run). mlagate's control files stay
    out. Returns False when there was nothing new."""
    path = Path(path)
    for lock in path.glob(f"**/{LOCK}"):  # every store mlagate wrote to in this worktree
        with store_lock(lock.parent):
            recover(lock.parent)  # finish a killed record's install rather than push half of it
    changed = _changes(path)
    refused = [name for status, name in changed
               if status not in ("??", "A ") and not (Path(name).name in REWRITTEN and status in (" M", "M ", "MM"))]
    if refused:
        raise StoreError(f"{path / refused[0]}: modified, not only added ({len(refused)} file(s) modified or "
                         f"deleted: {', '.join(refused[:3])}); results files and sidecars are append-only")
    if not changed:
        return False
    git("add", "--all", "--", ".", f":(exclude,glob)**/{CONTROL}*", repo=path)
    git("commit", "-q", "-m", message, repo=path)
    if push:
        branch = branch or git("rev-parse", "--abbrev-ref", "HEAD", repo=path)
        git("push", remote, f"HEAD:{branch}", repo=path)
    return True


def _changes(path) -> list:
    """(git status code, path) of every change in a worktree, mlagate's control files left out."""
    out = git("status", "--porcelain", "-z", "--untracked-files=all", repo=path, strip=False)
    entries, changes = iter(out.split("\0")), []
    for entry in entries:
        if not entry:
            continue
        status, name = entry[:2], entry[3:]
        if status[0] in "RC":  # a rename or copy: its source path follows
            next(entries, None)
        if not Path(name).name.startswith(CONTROL):
            changes.append((status, name))
    return changes

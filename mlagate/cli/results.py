"""`mlagate results`: use a git branch as the results store (CI pushes results to it), and merge the
shards of a record made on several runners (`mlagate record --shard I/N`) into one store."""

import argparse
import re
from pathlib import Path

from mlagate import exits
from mlagate.cli import flags


def add_parser(sub):
    p = sub.add_parser("results", help="use a git branch as the results store (CI pushes results to it); "
                                       "merge the shards of a record")
    actions = p.add_subparsers(dest="action", required=True, metavar="{checkout,push,merge}")
    branch = argparse.ArgumentParser(add_help=False)
    branch.add_argument("--branch", default="perf-results")
    branch.add_argument("--path", default=".asv/branch", help="worktree of the results branch")
    branch.add_argument("--remote", default="origin")
    branch.add_argument("--message", default="results", help="commit message for push")
    branch.add_argument("--no-push", action="store_true", help="commit in the worktree but do not push")
    actions.add_parser("checkout", parents=[branch], help="a worktree of the results branch")
    actions.add_parser("push", parents=[branch], help="commit the new results in the worktree and push them")
    merge = actions.add_parser("merge", help="merge the shard stores of one commit's record into a store")
    flags.machine(merge, "records")
    merge.add_argument("--commit", required=True, help="the commit the shards recorded (a full hash or a revision)")
    merge.add_argument("--into", required=True, help="the results store to add the merged record to")
    merge.add_argument("shards", nargs="+", metavar="SHARD_STORE",
                       help="the results directory of each `mlagate record --shard I/N --results DIR`")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    if args.action == "merge":
        return merge(args)
    from mlagate.store.branch import checkout_branch, commit_branch

    if args.action == "checkout":
        path = checkout_branch(Path.cwd(), args.branch, args.path, remote=args.remote)
        print(f"results branch '{args.branch}' at {path}; use --results {Path(path) / 'results'}")
    else:
        changed = commit_branch(args.path, args.message, remote=args.remote, branch=args.branch,
                                push=not args.no_push)
        print("pushed new results" if changed else "nothing new to push")
    return exits.OK


def merge(args) -> int:
    from mlagate.gitops import resolve
    from mlagate.store.merge import merge_shards

    # A full hash is taken as given (the merging job may lack the commit); anything else is resolved.
    commit = args.commit if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", args.commit) else resolve(args.commit)
    path = merge_shards([Path(s) for s in args.shards], Path(args.into), args.machine, commit)
    print(f"merged {len(args.shards)} shard(s) of {commit[:8]} on '{args.machine}' -> {path}")
    return exits.OK

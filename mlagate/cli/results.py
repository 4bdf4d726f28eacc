"""`mlagate results`: use a git branch as the results store (CI pushes results to it)."""

from pathlib import Path

from mlagate import exits


def add_parser(sub):
    p = sub.add_parser("results", help="use a git branch as the results store (CI pushes results to it)")
    p.add_argument("action", choices=("checkout", "push"))
    p.add_argument("--branch", default="perf-results")
    p.add_argument("--path", default=".asv/branch", help="worktree of the results branch")
    p.add_argument("--remote", default="origin")
    p.add_argument("--message", default="results", help="commit message for push")
    p.add_argument("--no-push", action="store_true", help="commit in the worktree but do not push")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.store.branch import checkout_branch, commit_branch

    if args.action == "checkout":
        path = checkout_branch(Path.cwd(), args.branch, args.path, remote=args.remote)
        print(f"results branch '{args.branch}' at {path}; use --results {Path(path) / 'results'}")
    else:
        changed = commit_branch(args.path, args.message, remote=args.remote, branch=args.branch,
                                push=not args.no_push)
        print("pushed new results" if changed else "nothing new to push")
    return exits.OK

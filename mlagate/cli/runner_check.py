"""`mlagate runner-check`: what this host lets a self-hosted runner's jobs reach, judged for the runner's role.
Run it on the host as the runner's user. Exit 0 nothing the role must not have, 1 something (each FAIL
says what), 2 the check could not run (docs/containers.md, "Setting up the runners")."""

from pathlib import Path

from mlagate import exits
from mlagate.measure import runner


def add_parser(sub):
    p = sub.add_parser("runner-check", help="what this host lets a self-hosted runner's jobs reach "
                                            "(Docker daemon, sudo, runner group, GPU), for its role")
    p.add_argument("--role", required=True, choices=sorted(runner.GROUPS),
                   help="pr: runs perf-pr.yml (pull requests' code); trusted: perf-main.yml and tune.yml")
    p.add_argument("--runner-dir", default=".", help="the runner's folder (with .runner and .env; default: here)")
    p.add_argument("--labels", default="", help="the labels the runner was registered with, comma-separated")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    folder = Path(args.runner_dir)
    if not folder.is_dir():
        raise ValueError(f"--runner-dir {folder}: no such folder")
    host = runner.gather(folder, [label for label in args.labels.split(",") if label])
    findings = runner.judge(host, args.role)
    for f in findings:
        print(f"{f.level:4}  {f.what}: {f.detail}")
    failed = [f for f in findings if f.level == runner.FAIL]
    print(f"{len(failed)} finding(s) a {args.role} runner must not have" if failed else
          f"nothing a {args.role} runner must not have")
    return exits.UNSAFE_RUNNER if failed else exits.OK

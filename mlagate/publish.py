"""TODO (being written): the `mlagate report` subcommand."""


def add_parser(sub):
    p = sub.add_parser("report", help="(not written yet)")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    raise NotImplementedError("mlagate report is not written yet")

"""TODO (being written): the `mlagate build` subcommand."""


def add_parser(sub):
    p = sub.add_parser("build", help="(not written yet)")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    raise NotImplementedError("mlagate build is not written yet")

"""TODO (being written): the `mlagate gpus` subcommand."""


def add_parser(sub):
    p = sub.add_parser("gpus", help="(not written yet)")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    raise NotImplementedError("mlagate gpus is not written yet")

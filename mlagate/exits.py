"""Exit codes of every mlagate command, in one place.

0 and 2 mean the same for every command: done, or could not decide (bad input, a
missing or corrupt file, a config value out of range, an unexpected exception: the
tools fail closed). 1 means that the one check a command makes did not pass; that
check differs per command, so each meaning has its own name here, and :data:`ONE`
says it per subcommand (``--help`` prints :func:`epilog`, made from this table). For
the gate, 1 means "regression" and nothing else (mlagate.decide.vocabulary.EXIT_CODE
maps each of its outcomes to a code here); a case its re-measure could not decide (unsure,
where perf.yml's gate.confirm.unsure is fail) is 2, as every other "could not decide" is.
"""

OK = 0
REGRESSION = 1  # gate: head is slower or breaks a rule; build: a compiler-resource rule failed
FAILED_CASES = 1  # bench: at least one case failed to run (crashed or gave a wrong result)
BUSY = 1  # gpus: a container or another process holds the GPU
CULPRIT = 1  # bisect: it named the commit that made the kernels slower
OFF_TARGET = 1  # calibrate: the detection curve misses its targets at 0% or 5% slowdown
TABLE_BEATEN = 1  # tune --check: a candidate beats the committed tuned config, or that config no longer runs
UNSAFE_RUNNER = 1  # runner-check: the host lets the runner's jobs reach more than its role may
ERROR = 2

DONE = "done"
FAILED = "error: bad input, a missing or corrupt file, a config value out of range, or a bug; nothing decided"
# What 2 means besides, per subcommand.
TWO = {"gate": "unsure: a case the interleaved re-measure could not decide within gate.confirm's budget "
               "(gate.confirm.unsure: fail)"}

# What exit 1 means, per subcommand; a subcommand not named here never exits 1.
ONE = {
    "gate": (REGRESSION, "regression: head is slower than base, or breaks a rule"),
    "build": (REGRESSION, "a compiler-resource rule failed"),
    "bench": (FAILED_CASES, "at least one case failed to run (crashed or gave a wrong result)"),
    "gpus": (BUSY, "a container or another process holds the GPU"),
    "bisect": (CULPRIT, "it named the commit that made the kernels slower"),
    "calibrate": (OFF_TARGET, "the detection curve misses its targets at 0% or 5% slowdown"),
    "tune": (TABLE_BEATEN, "with --check: a candidate beats the committed tuned config, or that config no longer "
                           "runs"),
    "runner-check": (UNSAFE_RUNNER, "the host lets the runner's jobs reach more than its role may"),
}


def codes(command: str | None = None) -> list:
    """(code, meaning) for ``command`` (a subcommand's name, the top of ``results merge`` for nested ones);
    None: the whole table, every meaning of 1 named by its command."""
    if command is None:
        ones = [(code, f"{name}: {meaning}") for name, (code, meaning) in ONE.items()]
    else:
        ones = [ONE[command]] if command in ONE else []
    two = FAILED + "".join(f"; {text}" if command else f"; {name}: {text}" for name, text in TWO.items()
                           if command in (None, name))
    return [(OK, DONE), *ones, (ERROR, two)]


def epilog(command: str | None = None) -> str:
    """The exit codes as ``--help`` lists them."""
    return "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in codes(command))

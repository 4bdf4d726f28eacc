"""perf.yml gate.confirm: the adaptive interleaved re-measure's rounds and budget, checked."""

from dataclasses import dataclass

from mlagate.config.reader import ConfigError, KeyReader

UNSURE = ("fail", "pass")  # gate.confirm.unsure: what a case the re-measure could not decide does to the verdict


@dataclass(frozen=True)
class Confirm:
    """The adaptive interleaved re-measure (decide/remeasure.py): rounds per flagged case, the PR's budget."""

    min_rounds: int
    max_rounds: int
    budget_s: float  # of re-measuring, over every flagged case of one gate run
    unsure_fails: bool  # an unsure case fails closed (exit 2) rather than passing with a warning


def parse_confirm(s: KeyReader) -> Confirm:
    min_rounds = s.get("min_rounds", int, minimum=2)
    max_rounds = s.get("max_rounds", int, minimum=2)
    if max_rounds < min_rounds:
        raise ConfigError(f"gate.confirm.max_rounds: must be >= gate.confirm.min_rounds ({min_rounds}), "
                          f"got {max_rounds}")
    unsure = s.get("unsure", str)
    if unsure not in UNSURE:
        raise ConfigError(f"gate.confirm.unsure: must be one of {', '.join(UNSURE)}, got {unsure!r}")
    return Confirm(min_rounds, max_rounds, s.get("budget_s", float, minimum=0, exclusive_min=True),
                   unsure == "fail")


__all__ = ["Confirm", "parse_confirm"]

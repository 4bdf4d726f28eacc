"""The one message for a name that is not one of those known (a subcommand, a choice, an implementation, a
machine): the closest known ones first (difflib), then all of them, so the error says what to type."""

import difflib


def did_you_mean(word, known) -> str:
    """"; did you mean X or Y?" naming the closest of ``known`` to ``word``, or "" where none is close."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=3, cutoff=0.5)
    if not close:
        return ""
    return f"; did you mean {' or '.join([', '.join(close[:-1]), close[-1]] if len(close) > 1 else close)}?"


def unknown(what: str, word, known) -> str:
    """"<what> 'word' is unknown; did you mean ...? (known: ...)"; ``what`` may be "" (argparse names the option)."""
    named = f"{what} {word!r}" if what else repr(word)
    return f"{named} is unknown{did_you_mean(word, known)} (known: {', '.join(map(str, known)) or 'none'})"

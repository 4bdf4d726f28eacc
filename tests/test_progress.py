"""mlagate.progress: a bar only on a terminal, TileLang's log records in the command's log file."""

import io
import logging

from rich.console import Console

from mlagate import progress


def test_no_terminal_no_escape_codes(capsys):
    with progress.bar("work", total=3) as steps:  # pytest's stderr is not a terminal
        for i in range(3):
            steps.advance(f"step {i}")
    err = capsys.readouterr().err
    assert "\x1b[" not in err and "work" not in err


def test_a_terminal_draws_the_bar():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with progress.bar("work", total=2, console=console) as steps:
        steps.advance("first")
        steps.advance("second one")
    drawn = out.getvalue()
    assert "\x1b[" in drawn and "2/2" in drawn and "second one" in drawn


def test_tilelang_records_go_to_the_log_not_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(progress.LOG_ENV, raising=False)
    logger = logging.getLogger("tilelang.jit.kernel")  # a child, as TileLang's modules log
    with progress.tilelang_log(tmp_path / "out", children=False) as path:
        logger.info("TileLang begins to compile kernel `main`")
        logger.warning("a TileLang warning")
    logger.info("after the command")
    text = path.read_text()
    assert path == tmp_path / "out" / progress.LOG_NAME
    assert "begins to compile kernel" in text and "a TileLang warning" in text and "after the command" not in text
    assert "begins to compile" not in capsys.readouterr().err


def test_spawned_processes_learn_the_log_and_the_handlers_come_back(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.LOG_ENV, raising=False)
    logger = logging.getLogger("tilelang")
    before = logger.handlers[:]
    with progress.tilelang_log(tmp_path, children=False, name="x.log"):
        assert progress.LOG_ENV not in __import__("os").environ
    monkeypatch.setattr(progress, "_capture", lambda path, load=True: (logger, logging.NullHandler(),
                                                                      (before, logger.propagate, logger.level)))
    with progress.tilelang_log(tmp_path) as path:
        assert __import__("os").environ[progress.LOG_ENV] == str(path)
    assert progress.LOG_ENV not in __import__("os").environ and logger.handlers == before


def test_no_record_no_file(tmp_path):
    with progress.tilelang_log(tmp_path / "out", children=False):
        pass  # a command that refuses its input before compiling anything
    assert not (tmp_path / "out").exists()


def test_where_the_time_went_adds_up_per_phase_largest_first(monkeypatch):
    clock = iter([0.0, 2.0, 10.0, 10.5, 20.0, 23.0, 30.0, 31.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    spent = {}
    with progress.spending(spent, "timing"):
        pass
    with progress.spending(spent, "load and check"):
        pass
    with progress.spending(spent, "timing"):
        pass
    assert spent == {"timing": 5.0, "load and check": 0.5}
    with progress.spending(None, "timing"):  # not kept: nothing to add to
        pass
    progress.add_spent(spent, {"load and check": 1.0, "profiler": 0.25})
    progress.add_spent(None, {"timing": 1.0})
    assert progress.time_spent(spent, 9.0) == ("measuring pass 9.0 s; the workers spent: timing 5.0 s, "
                                               "load and check 1.5 s, profiler 0.2 s")
    assert progress.time_spent({}, 0.0).endswith("spent: nothing")

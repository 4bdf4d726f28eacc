"""What a long command shows while it runs (and where its time went), and where TileLang's own chatter goes.

``bar(label, total)``: a context manager giving ``advance(description)``; a rich progress bar on stderr when
stderr is a terminal, nothing otherwise (CI logs stay clean). ``tilelang_log(folder)``: for its duration the
"tilelang" logger (its "begins to compile kernel" INFO lines) writes to ``folder/tilelang.log``, in this
process and in the spawned lowering and compiling processes (``child_init``), not to the terminal."""

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LOG_NAME = "tilelang.log"
LOG_ENV = "MLAGATE_TILELANG_LOG"  # the log's path, read by spawned processes (child_init)
FORMAT = "%(asctime)s %(process)d [%(name)s:%(levelname)s] %(message)s"


class Bar:
    """One task's progress; ``advance`` moves it one step and says what that step was."""

    def __init__(self, progress=None, task=None):
        self._progress, self._task = progress, task

    def advance(self, description: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=description or None)


@contextmanager
def bar(label: str, total: int | None = None, console=None):
    """A Bar for ``total`` steps (None: unknown); drawn only where ``console`` (default: stderr's) is a
    terminal. stdout's lines are drawn above the bar only when stdout is a terminal too, so that a redirected
    stdout keeps every line."""
    from rich.console import Console

    console = console or Console(stderr=True, highlight=False)
    if not console.is_terminal:
        yield Bar()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, redirect_stdout=sys.stdout.isatty(),
                  redirect_stderr=False) as progress:
        yield Bar(progress, progress.add_task(label, total=total))


class _LazyFile(logging.FileHandler):
    """Opened (its folder made) at the first record: a command that refuses its input writes nothing."""

    def __init__(self, path: Path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def _capture(path: Path, load: bool = True) -> tuple:
    """Point the "tilelang" logger (importing tilelang first where ``load``: its import adds the terminal
    handler this replaces) at path alone; what to hand back to _release."""
    try:
        if load:
            import tilelang  # noqa: F401
    except ImportError:
        pass
    logger = logging.getLogger("tilelang")
    handler = _LazyFile(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    saved = (logger.handlers[:], logger.propagate, logger.level)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logger.level or logging.INFO)  # TileLang's own level (INFO) where it set one
    return logger, handler, saved


def _release(logger, handler, saved) -> None:
    logger.handlers[:], logger.propagate, level = saved
    logger.setLevel(level)
    handler.close()


@contextmanager
def tilelang_log(folder, children: bool = True, name: str = LOG_NAME):
    """TileLang's log records go to ``folder/name`` (appended) for the duration; ``children``: also in
    the processes spawned meanwhile with ``child_init`` (not asv's, whose output ``mlagate record`` streams).
    Yields the log's path."""
    path = Path(folder) / name
    captured = _capture(path, load=children)  # record's process compiles nothing: no tilelang import for it
    before = os.environ.get(LOG_ENV)
    if children:
        os.environ[LOG_ENV] = str(path)
    try:
        yield path
    finally:
        if children and before is None:
            os.environ.pop(LOG_ENV, None)
        elif children:
            os.environ[LOG_ENV] = before
        _release(*captured)


def child_init() -> None:
    """A spawned process's initializer: TileLang's log to the parent's tilelang_log file, if one is open."""
    if os.environ.get(LOG_ENV):
        _capture(Path(os.environ[LOG_ENV]))


@contextmanager
def spending(spent: dict | None, phase: str):
    """Adds the wall seconds of its block to ``spent[phase]`` (where a run's time went; None: not kept)."""
    start = time.monotonic()
    try:
        yield
    finally:
        add_spent(spent, {phase: time.monotonic() - start})


def add_spent(spent: dict | None, phases: dict | None) -> None:
    for phase, seconds in (phases or {}).items() if spent is not None else ():
        spent[phase] = spent.get(phase, 0.0) + seconds


def time_spent(spent: dict, wall_s: float) -> str:
    """Where a measuring pass's ``wall_s`` went, its largest phase first (the workers' sums: with several GPUs
    they add up to more than the wall)."""
    parts = [f"{phase} {seconds:.1f} s" for phase, seconds in sorted(spent.items(), key=lambda kv: -kv[1])]
    return f"measuring pass {wall_s:.1f} s; the workers spent: " + (", ".join(parts) or "nothing")

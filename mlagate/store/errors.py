"""The two errors the store raises; the CLI catches them without importing the gate's statistics."""


class StoreError(Exception):
    """A results file or folder that cannot be used; the message names the path."""


class GateError(Exception):
    """Results the gate cannot decide without (missing commit, machine or platform);
    the message says what to run. Defined here, not in gate.py, so that the CLI can
    catch it without importing the gate's statistics."""

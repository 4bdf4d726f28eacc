"""The CPU stand-ins' one import hook (tests/asv_standin, tests/rehearsal): code run around a module's first
execution, in every process they enter (each imports this with tests/ on sys.path for that import alone)."""

import importlib.abc
import importlib.machinery


class AroundExec(importlib.abc.MetaPathFinder):
    """For a module named in ``wrap``, ``wrap[name](module, run)`` executes it; ``run()`` runs its own code."""

    def __init__(self, wrap: dict):
        self.wrap = wrap

    def find_spec(self, name, path, target=None):
        if name not in self.wrap:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module):
            self.wrap[name](module, lambda: real(module))

        spec.loader.exec_module = exec_module
        return spec

"""mlagate: a performance-regression gate for TileLang's MLA decode kernels.

The subpackages are the flow, one way: measure -> store -> decide -> report (with build, the
compiler-resource check, beside measure), driven by ``gate`` and the ``cli`` shells.

The kernels live at the top of the tree (``kernels/``). An installed mlagate has them inside as
``mlagate.kernels`` (setuptools ``package-dir``); run from a source tree (a GPU host with
``PYTHONPATH=.``, asv's worktree of a recorded commit) they are loaded from the tree beside this
package, so a commit is always measured with its own kernels.
"""

import importlib.util
import sys
from pathlib import Path


def _kernels_from_source_tree():
    here = Path(__file__).resolve().parent
    init = here.parent / "kernels" / "__init__.py"
    if (here / "kernels").is_dir() or not init.is_file() or "mlagate.kernels" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location("mlagate.kernels", init,
                                                  submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mlagate.kernels"] = module
    spec.loader.exec_module(module)


_kernels_from_source_tree()

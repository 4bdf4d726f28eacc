"""The tree shows the flow (README "Layout"): every package folder is packaged, no module grows past
~300 lines, nothing imports against the flow, and kernels/ is mlagate.kernels without a symlink."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mlagate"
MAX_LINES = 300
# The flow, lowest first: a module may import its own layer and the ones before it, never a later one.
LAYERS = (
    {"mlagate.case", "mlagate.hardware", "mlagate.exits", "mlagate.config", "mlagate.config.reader",
     "mlagate.config.tune", "mlagate.config.workloads", "mlagate.atomic", "mlagate.gitops", "mlagate.kernels"},
    {"mlagate.measure"},
    {"mlagate.store"},
    {"mlagate.decide"},
    {"mlagate.build"},
    {"mlagate.report"},
    {"mlagate.gate", "mlagate.bisect", "mlagate.ladder", "mlagate.gpu_check", "mlagate.tune"},
    {"mlagate.cli"},
)


def layer_of(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    raise AssertionError(f"{module}: in no layer of LAYERS; add it where it belongs in the flow")


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"), path


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mlagate"):
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            yield from ((a.name, []) for a in node.names if a.name.startswith("mlagate"))


def test_pyproject_packages_every_package_folder():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders | {"mlagate.kernels"}
    assert setuptools["package-dir"] == {"mlagate.kernels": "kernels"}


def test_no_module_is_longer_than_about_300_lines():
    long = {name: n for name, path in modules() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by job: {long}"


def test_nothing_imports_against_the_flow():
    upward = []
    for name, path in modules():
        for target, names in imports(path):
            # `from mlagate import x` names the module x
            targets = [f"mlagate.{n}" for n in names] if target == "mlagate" else [target]
            upward += [f"{name} -> {t}" for t in targets if layer_of(t) > layer_of(name)]
    assert not upward


def test_kernels_are_the_top_level_folder_not_a_link():
    import mlagate.kernels.mla_decode as kernel

    assert not any(p.is_symlink() for p in PACKAGE.rglob("*"))
    assert Path(kernel.__file__).resolve() == ROOT / "kernels" / "mla_decode.py"


def test_every_package_folder_is_in_the_readme_layout_table():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Layout"):].split("\n## ", 1)[0]
    folders = sorted(f"mlagate/{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py"))
    assert [f for f in folders if f"`{f}`" not in table] == []


def test_the_names_perf_yml_may_use_are_the_implementations_there_are():
    from mlagate import config
    from mlagate.measure import impls

    assert tuple(impls.PREPARE) == config.KNOWN_IMPLS

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
     "mlagate.config.tune", "mlagate.config.workloads", "mlagate.atomic", "mlagate.json_reader", "mlagate.gitops",
     "mlagate.names", "mlagate.kernels", "mlagate.progress"},
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


# A newcomer's three questions, answered by the README's layout table: the row whose "where a change goes" cell
# holds the phrase, and the files that cell names for it (in backticks, relative to the row's folder or the root).
NEWCOMER_QUESTIONS = ("a new vendor kernel", "a new gate rule", "a new workload")


def layout_rows(readme: str) -> list:
    """(folder cell, where-a-change-goes cell) of every row of the README's layout table."""
    table = readme[readme.index("## Layout"):].split("\n## ", 1)[0]
    header, *rows = [line for line in table.splitlines() if line.startswith("|")]
    assert "where a change goes" in header, "the layout table lost its 'where a change goes' column"
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows if not set(row) <= set("|-: ")]
    return [(c[0], c[-1]) for c in cells]


def test_the_layout_table_says_where_a_vendor_kernel_a_gate_rule_and_a_workload_go():
    rows = layout_rows((ROOT / "README.md").read_text())
    for question in NEWCOMER_QUESTIONS:
        answers = [(folder, goes) for folder, goes in rows if question in goes]
        assert len(answers) == 1, f"the layout table should say in one row where {question} goes: {answers}"
        folder, goes = answers[0]
        named = goes[goes.index(question):].split(";")[0]  # the files named for this question
        files = [n for n in named.split("`")[1::2] if "." in n or "/" in n]
        assert files, f"{question!r}: the layout table names no file ({goes!r})"
        bases = [ROOT / f.strip("`") for f in folder.split("`")[1::2]] + [ROOT]
        missing = [f for f in files if not any((b / f).exists() for b in bases)]
        assert not missing, f"{question!r}: the layout table names files that are not in the tree: {missing}"

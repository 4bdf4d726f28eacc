"""An empty stand-in of this project, made from its pyproject.toml: every package folder with an
empty __init__.py, and a README. pip installs the stand-in to get the pinned dependencies before the
code is copied in, so an image's dependency layer is cached on pyproject.toml alone; .ci/resolve-images
resolves the same stand-in.

    python3 stand_in.py [DIR]    (DIR holds pyproject.toml; default: the current folder)
"""

import sys
import tomllib
from pathlib import Path


def make(root: Path) -> list:
    """Create the stand-in's folders in ``root``; returns the top-level paths it made (to remove later)."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dirs = setuptools.get("package-dir", {})
    made = {root / "README.md"}
    for package in setuptools["packages"]:
        folder = Path(package_dirs.get(package, package.replace(".", "/")))
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").touch()
        made.add(root / folder.parts[0])
    (root / "README.md").touch()
    return sorted(made)


if __name__ == "__main__":
    for path in make(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(path)

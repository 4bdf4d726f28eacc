"""The images' pins: the amd-aiter wheel (pyproject's aiter extra, its own requirements), pyproject.toml and the
Dockerfiles (CPU).

The first tests parse files only (no network). The last one feeds `.ci/resolve-images` a conflict that only
pip's resolver can find, so it needs PyPI and skips, saying so, when PyPI cannot be reached.
"""

import importlib.metadata
import os
import re
import shutil
import ssl
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / ".ci" / "resolve-images"
ROCM, CUDA = ROOT / "Dockerfile.rocm", ROOT / "Dockerfile.cuda"
PYPROJECT = ROOT / "pyproject.toml"
# The images' interpreter (Python 3.12 on Linux x86_64), for environment markers.
IMAGE_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
             "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def checker(*args, root=ROOT):
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *args], capture_output=True,
                          text=True, timeout=600)


def repo_copy(tmp_path):
    """The files the checker reads, copied to tmp_path, to be edited there."""
    for name in ("Dockerfile.rocm", "Dockerfile.cuda", "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def aiter_versions(dockerfile_text):
    return re.findall(r"^ARG AITER_VERSION=(\S+)\s*$", dockerfile_text, re.M)


def aiter_extra():
    """The version pyproject's aiter extra pins amd-aiter to."""
    (text,) = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["aiter"]
    req = Requirement(text)
    assert canonicalize_name(req.name) == "amd-aiter" and len(req.specifier) == 1, text
    (spec,) = req.specifier
    assert spec.operator == "==", text
    return spec.version


# --- (a) the image's aiter is pyproject's aiter extra, no network ----------------------------------------


def test_dockerfile_rocm_installs_the_aiter_extra_and_names_its_version():
    assert set(aiter_versions(ROCM.read_text())) == {aiter_extra()}
    text = ROCM.read_text().replace("\\\n", " ")
    installs = re.findall(r"pip install[^\n]*", text)
    assert any(re.search(r"\"\.\[[\w,]*\baiter\b[\w,]*\]\"", line) for line in installs), installs
    # no second aiter: not from source, not from a pin of its own
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"git clone|setup\.py|amd-aiter==|AITER_COMMIT", code)
    assert "AITER_JIT_DIR=/cache/aiter-jit/amd-aiter-${AITER_VERSION}-torch${TORCH_VERSION}" in text


def test_checker_static_checks_pass_on_this_checkout():
    out = checker("--static-only")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"AITER_VERSION = {aiter_extra()}" in out.stdout


def test_checker_fails_when_aiter_version_is_bumped_without_the_extra(tmp_path):
    root = repo_copy(tmp_path)
    dockerfile = root / "Dockerfile.rocm"
    old = aiter_extra()
    dockerfile.write_text(dockerfile.read_text().replace(f"AITER_VERSION={old}", "AITER_VERSION=0.1.12.post1"))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "AITER_VERSION (0.1.12.post1 at Dockerfile.rocm:" in out.stderr and f"amd-aiter=={old}" in out.stderr


def test_checker_fails_when_the_extra_is_bumped_without_aiter_version(tmp_path):
    root = repo_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    old = aiter_extra()
    pyproject.write_text(pyproject.read_text().replace(f'"amd-aiter=={old}"', '"amd-aiter==0.1.12.post1"'))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"AITER_VERSION ({old} at" in out.stderr and "amd-aiter==0.1.12.post1" in out.stderr


def test_checker_fails_when_the_extra_pins_no_aiter(tmp_path):
    root = repo_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(f'"amd-aiter=={aiter_extra()}"', '"amd-aiter>=0.1"'))
    out = checker("--static-only", root=root)
    assert out.returncode == 1 and "must pin amd-aiter==<version> once" in out.stderr, out.stdout + out.stderr


# --- (b) one version per package across aiter, pyproject and the Dockerfiles, no network -----------------


def pins_of(requirements):
    """{package: version} of the `==` pins among requirement strings that apply to the images."""
    pins = {}
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(IMAGE_ENV):
            continue
        for spec in req.specifier:
            if spec.operator == "==":
                pins[canonicalize_name(req.name)] = spec.version
    return pins


def aiter_requires():
    """The pinned amd-aiter wheel's own requirements (METADATA Requires-Dist) that apply to the images."""
    installed = importlib.metadata.distribution("amd-aiter")
    assert installed.version == aiter_extra(), "pip install -e '.[aiter]'"
    reqs = [Requirement(text) for text in installed.requires or []]
    return {canonicalize_name(r.name): r.specifier for r in reqs if r.marker is None or r.marker.evaluate(IMAGE_ENV)}


def pyproject_pins():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return pins_of(project["dependencies"] + project["optional-dependencies"]["test"])


def dockerfile_pins(path):
    text = path.read_text().replace("\\\n", " ")
    args = [word for line in re.findall(r"pip install([^\n]*)", text) for word in line.split()]
    return pins_of([w.strip("\"'") for w in args if re.fullmatch(r"[\"']?[A-Za-z0-9][\w.-]*==[\w.+-]+[\"']?", w)])


def test_the_pin_parsers_see_the_pins():
    assert {"pybind11", "pandas", "einops", "psutil"} <= aiter_requires().keys()
    assert {"pytest", "matplotlib", "pyyaml", "tilelang"} <= pyproject_pins().keys()
    assert {"ninja"} <= dockerfile_pins(ROCM).keys()
    assert {"sgl-flash-mla", "flashinfer-python"} <= dockerfile_pins(CUDA).keys()


def test_the_rocm_pins_satisfy_the_aiter_wheels_own_requirements():
    requires = aiter_requires()
    pins = {**pyproject_pins(), **dockerfile_pins(ROCM)}
    refused = [f"{name}=={pins[name]}: amd-aiter requires {name}{requires[name]}"
               for name in sorted(requires.keys() & pins.keys()) if not requires[name].contains(pins[name])]
    assert not refused, refused


def test_pyproject_and_dockerfile_rocm_agree_on_every_package_they_both_pin():
    project, rocm = pyproject_pins(), dockerfile_pins(ROCM)
    assert all(project[n] == rocm[n] for n in project.keys() & rocm.keys())


def test_pyproject_and_dockerfile_cuda_agree():
    project, cuda = pyproject_pins(), dockerfile_pins(CUDA)
    assert all(project[n] == cuda[n] for n in project.keys() & cuda.keys())


def test_checker_names_a_pin_the_aiter_wheel_refuses(tmp_path):
    root = repo_copy(tmp_path)
    dockerfile = root / "Dockerfile.rocm"
    dockerfile.write_text(dockerfile.read_text().replace("ninja==1.13.0", "ninja==1.13.0 pybind11==2.13.6"))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"amd-aiter=={aiter_extra()}'s own requirements refuse" in out.stderr, out.stderr
    assert "pybind11==2.13.6 (Dockerfile.rocm:" in out.stderr and "requires pybind11>=3.0.1" in out.stderr, out.stderr


def test_checker_names_a_package_pinned_to_two_versions(tmp_path):
    root = repo_copy(tmp_path)
    dockerfile = root / "Dockerfile.rocm"
    dockerfile.write_text(dockerfile.read_text().replace("ninja==1.13.0", "ninja==1.13.0 pytest==9.0.2"))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "pytest==9.0.2  (Dockerfile.rocm:" in out.stderr and "pytest==9.0.3  (pyproject.toml" in out.stderr, \
        out.stderr


# --- (c) pip's resolver finds what the pins alone do not (needs PyPI) ------------------------------------


def pypi_reachable():
    try:
        context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
        with urllib.request.urlopen("https://pypi.org/simple/pytest-benchmark/", timeout=10, context=context):
            return True
    except Exception:
        return False


def test_checker_fails_on_a_conflict_only_the_resolver_sees(tmp_path):
    if not pypi_reachable():
        pytest.skip("PyPI (https://pypi.org) is not reachable from here; .ci/resolve-images needs it to resolve")
    # pytest-benchmark 5.3.1 requires pytest>=8.1: no two pins name the same package, pip must find it.
    (tmp_path / "Dockerfile.conflict").write_text(
        "FROM python:3.12 AS base\n"
        "RUN python3 -m pip install --no-cache-dir pytest-benchmark==5.3.1 pytest==8.0.0\n")
    out = checker("Dockerfile.conflict", root=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "packages involved: pytest, pytest-benchmark" in out.stderr, out.stderr
    assert "pytest-benchmark 5.3.1 depends on pytest>=8.1" in out.stderr, out.stderr
    # The same Dockerfile with a pytest that satisfies it resolves.
    (tmp_path / "Dockerfile.conflict").write_text(
        "FROM python:3.12 AS base\n"
        "RUN python3 -m pip install --no-cache-dir pytest-benchmark==5.3.1 pytest==9.0.3\n")
    out = checker("Dockerfile.conflict", root=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr

"""The images' pins: aiter's requirements at AITER_COMMIT, pyproject.toml and the Dockerfiles (CPU).

The first tests parse files only (no network). The last one feeds `.ci/resolve-images` a conflict that only
pip's resolver can find, so it needs PyPI and skips, saying so, when PyPI cannot be reached.
"""

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
AITER_REQUIREMENTS = ROOT / "docker" / "aiter-requirements.txt"
ROCM, CUDA = ROOT / "Dockerfile.rocm", ROOT / "Dockerfile.cuda"
PYPROJECT = ROOT / "pyproject.toml"
# The images' interpreter (Python 3.12 on Linux x86_64), for environment markers.
IMAGE_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
             "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
HASH = re.compile(r"\b[0-9a-f]{40}\b")


def checker(*args, root=ROOT):
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *args], capture_output=True,
                          text=True, timeout=600)


def repo_copy(tmp_path):
    """The files the checker reads, copied to tmp_path, to be edited there."""
    for name in ("Dockerfile.rocm", "Dockerfile.cuda", "pyproject.toml", "docker/aiter-requirements.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def aiter_commits(dockerfile_text):
    return re.findall(r"^ARG AITER_COMMIT=(\S+)\s*$", dockerfile_text, re.M)


# --- (a) aiter's requirements file and AITER_COMMIT, no network ------------------------------------------


def test_aiter_requirements_header_names_the_commit_dockerfile_rocm_builds():
    commits = set(aiter_commits(ROCM.read_text()))
    assert len(commits) == 1, f"Dockerfile.rocm sets AITER_COMMIT to more than one value: {commits}"
    (commit,) = commits
    assert HASH.fullmatch(commit), f"AITER_COMMIT must be a full commit hash, got {commit!r}"
    header = AITER_REQUIREMENTS.read_text().splitlines()[0]
    assert header.startswith("#") and HASH.findall(header) == [commit], header


def test_dockerfile_rocm_installs_the_committed_copy_and_checks_it_against_the_clone():
    text = ROCM.read_text()
    assert "COPY docker/aiter-requirements.txt /tmp/aiter-requirements.txt" in text
    installs = re.findall(r"pip install[^\n]*", text.replace("\\\n", " "))
    assert not any(re.search(r"-r\s+(\S*/)?requirements\.txt", line) for line in installs), installs
    # The aiter-src stage compares the copy with the clone's file at AITER_COMMIT.
    assert "diff - aiter/requirements.txt" in text


def test_checker_static_checks_pass_on_this_checkout():
    out = checker("--static-only")
    assert out.returncode == 0, out.stdout + out.stderr


def test_checker_fails_when_aiter_commit_is_bumped_without_refreshing_the_file(tmp_path):
    root = repo_copy(tmp_path)
    dockerfile = root / "Dockerfile.rocm"
    (old,) = set(aiter_commits(dockerfile.read_text()))
    dockerfile.write_text(dockerfile.read_text().replace(old, "0123456789abcdef0123456789abcdef01234567"))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "AITER_COMMIT" in out.stderr and "docker/aiter-requirements.txt" in out.stderr and old in out.stderr


def test_checker_fails_without_a_commit_in_the_header(tmp_path):
    root = repo_copy(tmp_path)
    requirements = root / "docker" / "aiter-requirements.txt"
    requirements.write_text("# aiter requirements\n" + "".join(requirements.read_text().splitlines(True)[1:]))
    out = checker("--static-only", root=root)
    assert out.returncode == 1 and "first line" in out.stderr, out.stdout + out.stderr


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


def aiter_pins():
    lines = [line.split(" #")[0].strip() for line in AITER_REQUIREMENTS.read_text().splitlines()]
    return pins_of([line for line in lines if line and not line.startswith("#")])


def pyproject_pins():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return pins_of(project["dependencies"] + project["optional-dependencies"]["test"])


def dockerfile_pins(path):
    text = path.read_text().replace("\\\n", " ")
    args = [word for line in re.findall(r"pip install([^\n]*)", text) for word in line.split()]
    return pins_of([w.strip("\"'") for w in args if re.fullmatch(r"[\"']?[A-Za-z0-9][\w.-]*==[\w.+-]+[\"']?", w)])


def test_the_pin_parsers_see_the_pins():
    assert {"pytest", "matplotlib", "pyyaml", "ninja", "flydsl"} <= aiter_pins().keys()
    assert "pandas" in aiter_pins()  # the python_version >= "3.11" line, not the < "3.11" one
    assert aiter_pins()["pandas"] != "2.3.3"
    assert {"pytest", "matplotlib", "pyyaml", "tilelang"} <= pyproject_pins().keys()
    assert {"ninja", "setuptools-scm"} <= dockerfile_pins(ROCM).keys()
    assert {"sgl-flash-mla", "flashinfer-python"} <= dockerfile_pins(CUDA).keys()


def test_aiter_pyproject_and_dockerfile_rocm_agree_on_every_package_they_both_pin():
    aiter = aiter_pins()
    others = {"pyproject.toml": pyproject_pins(), "Dockerfile.rocm": dockerfile_pins(ROCM)}
    disagree = [f"{name}: aiter {aiter[name]}, {where} {pins[name]}"
                for where, pins in others.items() for name in sorted(aiter.keys() & pins.keys())
                if aiter[name] != pins[name]]
    assert not disagree, "one version per package in the ROCm image: " + "; ".join(disagree)
    assert {"pytest", "matplotlib", "pyyaml", "ninja"} <= aiter.keys() & (others["pyproject.toml"].keys()
                                                                          | others["Dockerfile.rocm"].keys())


def test_pyproject_and_dockerfile_cuda_agree():
    project, cuda = pyproject_pins(), dockerfile_pins(CUDA)
    assert all(project[n] == cuda[n] for n in project.keys() & cuda.keys())


def test_checker_names_a_package_pinned_to_two_versions(tmp_path):
    root = repo_copy(tmp_path)
    dockerfile = root / "Dockerfile.rocm"
    dockerfile.write_text(dockerfile.read_text().replace("ninja==1.13.0", "ninja==1.13.2"))
    out = checker("--static-only", root=root)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ninja==1.13.2" in out.stderr and "ninja==1.13.0" in out.stderr, out.stderr


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

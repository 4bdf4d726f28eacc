"""The rehearsal's ``module_aiter_enum``: what aiter JIT-builds from csrc/pybind/aiter_enum_pybind.cu when it
imports, made here without a compiler. The members are read from the installed aiter's own C++ header
(csrc/include/aiter_enum.h), so they are aiter's. ``__doc__`` starts with "Members:" as pybind11's enum
docstrings do: aiter's compile_ops skips its argument check for those."""

import enum
import re
from pathlib import Path

from mlagate.measure import aiter_dispatch


def _enums(header: Path) -> dict:
    """{enum class name: {member: value}} of the header's ``enum class X : int { ... };`` blocks."""
    out = {}
    for name, body in re.findall(r"enum\s+class\s+(\w+)\s*:\s*int\s*\{(.*?)\};", header.read_text(), re.S):
        members, value = {}, -1
        for item in (i.strip() for i in body.split(",")):
            if item:
                member, _, given = (part.strip() for part in item.partition("="))
                value = int(given) if given else value + 1
                members[member] = value
        out[name] = members
    return out


_ENUMS = _enums(aiter_dispatch.meta_root() / "csrc" / "include" / "aiter_enum.h")


def _pybind_enum(name):
    cls = enum.IntEnum(name, _ENUMS[name])
    cls.__doc__ = "Members:\n\n" + "\n\n".join(f"  {m}" for m in _ENUMS[name])
    return cls


ActivationType = _pybind_enum("ActivationType")
QuantType = _pybind_enum("QuantType")

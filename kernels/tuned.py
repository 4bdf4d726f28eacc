"""Tuned tile configs per GPU architecture: the committed tables kernels/tuned/<arch>.yaml.

A table lists, per config family (mla_decode.CONFIGS) and shape, the tile config that
`mlagate tune` measured fastest there, with how it was measured. A shape it does not
list runs the family default. A candidate config has an implementation name of its own,
``tilelang-hopper@N64.H64.split0.t256.stages2.FullCol``, so the measuring worker can
time it like any implementation.

File format (a change to it is a change to the kernels, gated like code)::

    version: 2
    arch: sm_90
    families:
      hopper:
        - shape: {batch: 64, seqlen: 4096, heads: 16, dtype: float16}
          config: {block_N: 64, block_H: 64, num_split: 2, threads: 256, num_stages: 2, policy: FullCol}
          measured: {tflops: 123.4, default_tflops: 110.2, date: '2026-11-30', gpu: NVIDIA H200, ...}
        - shape: {batch: 64, seqlen: 4096, heads: 16, dtype: float16, s_q: 2}
          ...

A shape's ``s_q`` (query tokens per sequence) is written past one token only: an entry without it is s_q 1.

``arch`` is the table's architecture; a family in it must be one of that architecture's (tile_rules.FAMILY_ARCH),
so a table read for another architecture, or holding another's family, is refused naming the file. Version 1 (no
``arch``) is still read, so an older commit's table can be re-measured; it is never written.
"""

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlagate.atomic import write_replace
from mlagate.case import CANDIDATE_MARK, TILELANG_PREFIX
from mlagate.config.reader import KeyReader, UniqueKeyLoader
from mlagate.hardware import arch_key
from mlagate.json_reader import LATENCY_CEILING_S, LATENCY_FLOOR_S, TFLOPS_CEILING, TFLOPS_FLOOR, bounded
from mlagate.kernels import mla_decode
from mlagate.kernels.tile_rules import FAMILY_ARCH

VERSION = 2
LEGACY_VERSION = 1  # before the arch key
TOP_KEYS = ("version", "arch", "families")
TABLE_DIR = Path(__file__).parent / "tuned"
# The TileConfig fields a tune varies; name and operands_in_shared belong to the family.
TUNABLE = ("block_N", "block_H", "num_split", "threads", "num_stages", "policy")
# How a candidate's name spells each tunable field, in TUNABLE's order: N64.H64.split0.t256.stages2.FullCol
NAME_TAGS = dict(zip(TUNABLE, ("N", "H", "split", "t", "stages", "")))
UNTUNABLE = tuple(f.name for f in dataclasses.fields(mla_decode.TileConfig) if f.name not in TUNABLE)
SHAPE_FIELDS = {"batch": int, "seqlen": int, "heads": int, "dtype": str}
# s_q x heads query rows tile differently from heads alone: a shape key of its own, omitted where 1
OPTIONAL_SHAPE_FIELDS = {"s_q": (int, 1)}
ENTRY_KEYS = ("shape", "config", "measured")
# The numbers of an entry's `measured` (each optional; default_tflops null where the default was not measured),
# bounded as every measurement the store reads is (json_reader): NaN, an infinity or a string is no measurement.
MEASURED_BOUNDS = {"tflops": (TFLOPS_FLOOR, TFLOPS_CEILING), "default_tflops": (TFLOPS_FLOOR, TFLOPS_CEILING),
                   "median_us": (LATENCY_FLOOR_S * 1e6, LATENCY_CEILING_S * 1e6)}
HEADER = ("# Tuned tile configs for {arch} (written by `mlagate tune`; a PR that changes it is gated like code).\n"
          "# A shape not listed runs its family's default config (CONFIGS in kernels/mla_decode.py).\n")


@dataclass(frozen=True)
class Entry:
    """One shape's tuned config and how it was measured (tflops, date, gpu, command, ...)."""

    shape: mla_decode.Shape
    config: mla_decode.TileConfig
    measured: dict


class _Malformed(Exception):
    """A problem at one key of a table (the caller adds the file)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}" if where else problem)


def table_path(arch: str) -> Path:
    """One table per base architecture: sm_90a and sm_90 read sm_90.yaml, gfx942:xnack- gfx942.yaml."""
    return TABLE_DIR / f"{arch_key(arch)}.yaml"


def shape_key(shape) -> tuple:
    return tuple(getattr(shape, name) for name in SHAPE_FIELDS) + \
        tuple(getattr(shape, name, default) for name, (_, default) in OPTIONAL_SHAPE_FIELDS.items())


def _family(name) -> mla_decode.TileConfig:
    if name not in mla_decode.CONFIGS:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(mla_decode.CONFIGS)}")
    return mla_decode.CONFIGS[name]


def _check_family(config: mla_decode.TileConfig, family: str) -> None:
    default = _family(family)
    if any(getattr(config, name) != getattr(default, name) for name in UNTUNABLE):
        raise ValueError(f"{config}: not a config of family {family} (its {' or '.join(UNTUNABLE)} differ)")


def _typed(raw, where: str, types: dict) -> dict:
    """``raw`` as a mapping with exactly the keys of ``types``, each value of its type."""
    reader = KeyReader.mapping(raw, where, types)
    return {key: reader.get(key, kind) for key, kind in types.items()}


def _shape(raw, where: str) -> mla_decode.Shape:
    optional = {name: kind for name, (kind, _) in OPTIONAL_SHAPE_FIELDS.items()}
    reader = KeyReader.mapping(raw, where, {**SHAPE_FIELDS, **optional}, required=SHAPE_FIELDS)
    fields = {key: reader.get(key, kind) for key, kind in {**SHAPE_FIELDS, **optional}.items() if key in raw}
    shape = mla_decode.Shape(**fields)
    try:
        shape.check()
    except ValueError as e:
        raise _Malformed(where, str(e)) from None
    return shape


def _config(raw, where: str, family: mla_decode.TileConfig) -> mla_decode.TileConfig:
    for key in raw if isinstance(raw, dict) else ():
        if key in UNTUNABLE:
            raise _Malformed(f"{where}.{key}", f"not tunable (the family sets it); tunable: {', '.join(TUNABLE)}")
    values = _typed(raw, where, {name: type(getattr(family, name)) for name in TUNABLE})
    for name, value in values.items():  # one field at a time, so the error names its key
        try:
            family.with_(**{name: value}).check()
        except ValueError as e:
            raise _Malformed(f"{where}.{name}", str(e)) from None
    return family.with_(**values)


def _entries(raw, where: str, family: mla_decode.TileConfig, arch: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _Malformed(where, f"must be a list of entries, got {raw!r}")
    entries, first = {}, {}
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        KeyReader.mapping(item, at, ENTRY_KEYS, required=ENTRY_KEYS)
        shape, config = _shape(item["shape"], f"{at}.shape"), _config(item["config"], f"{at}.config", family)
        try:
            mla_decode.plan(shape, config, arch)  # e.g. heads not a multiple of block_H
        except ValueError as e:
            raise _Malformed(at, str(e)) from None
        if not isinstance(item["measured"], dict):
            raise _Malformed(f"{at}.measured", f"must be a mapping, got {item['measured']!r}")
        for name, (low, high) in MEASURED_BOUNDS.items():
            value = item["measured"].get(name)
            if value is not None or (name == "tflops" and name in item["measured"]):
                try:
                    bounded(value, f"{at}.measured.{name}", low, high)
                except ValueError as e:
                    raise _Malformed("", str(e)) from None
        key = shape_key(shape)
        if key in entries:
            raise _Malformed(f"{at}.shape", f"duplicate of {first[key]}.shape")
        entries[key], first[key] = Entry(shape, config, item["measured"]), at
    return entries


def _parse(text: str, arch: str) -> dict:
    data = yaml.load(text, Loader=UniqueKeyLoader)
    if not isinstance(data, dict):
        raise _Malformed("", f"must be a mapping with version and families, got {data!r}")
    for key in data:
        if key not in TOP_KEYS:
            raise _Malformed(key, f"unknown key; expected {', '.join(TOP_KEYS)}")
    version = data.get("version")
    if type(version) is not int or version not in (VERSION, LEGACY_VERSION):  # type(): YAML's true == 1
        raise _Malformed("version", f"must be {VERSION} (or {LEGACY_VERSION}, a table from before its arch key), "
                                    f"got {version!r}")
    if (version == VERSION or "arch" in data) and data.get("arch") != arch_key(arch):
        raise _Malformed("arch", f"must be {arch_key(arch)}, the architecture it is read for, got "
                                 f"{data.get('arch', 'none')!r}")
    families = data.get("families")
    if not isinstance(families, dict):
        raise _Malformed("families", f"must be a mapping of family to entries, got {families!r}")
    table = {}
    for name, raw in families.items():
        try:
            family = _family(name)
        except ValueError as e:
            raise _Malformed(f"families.{name}", str(e)) from None
        if FAMILY_ARCH[name] != arch_key(arch):
            raise _Malformed(f"families.{name}", f"the {name} family is {FAMILY_ARCH[name]}'s, not {arch_key(arch)}'s")
        table[name] = _entries(raw, f"families.{name}", family, arch)
    return table


def parse_table(text: str, arch: str, source: str) -> dict:
    """{family: {shape_key: Entry}} of a table's text, as load_table reads it from a file; for a caller that
    holds the text (the gate's re-measure reads a commit's table with `git show`). A malformed table raises
    ValueError "<source>: <key>: <problem>" (e.g. "kernels/tuned/sm_90.yaml at 1a2b3c: families.hopper[0]
    .config.block_N: ..."), or "<source>: not YAML: ..."."""
    return _copy(_parse_named(text, arch, source))


def _parse_named(text: str, arch: str, source) -> dict:
    try:
        return _parse(text, arch)
    except yaml.YAMLError as e:
        raise ValueError(f"{source}: not YAML: {e}") from None
    except (_Malformed, ValueError) as e:  # ValueError: UniqueKeyLoader's duplicate key
        raise ValueError(f"{source}: {e}") from None


def _copy(table: dict) -> dict:
    return {family: dict(entries) for family, entries in table.items()}  # a caller's change stays its own


# (path, arch) -> ((mtime_ns, size, inode), text, table): a table that did not change is neither read nor
# parsed again (mla_decode() asks on every call); a few entries at most, whatever paths callers pass.
_loaded: dict = {}
_CACHED = 16


def _table(arch: str, path: Path, must_exist: bool) -> dict:
    """The table at ``path``, as cached: not to be changed. No file: {}, or ValueError if ``must_exist``."""
    try:
        stat = path.stat()
        key, stamp = (str(path), arch_key(arch)), (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if key in _loaded and _loaded[key][0] == stamp:
            return _loaded[key][2]
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        if must_exist:
            raise ValueError(f"{path}: no such table") from None
        return {}
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    except OSError as e:  # a folder, no permission
        raise ValueError(f"{path}: not readable ({e})") from None
    old = _loaded.pop(key, None)
    table = old[2] if old and old[1] == text else _parse_named(text, arch, path)
    while len(_loaded) >= _CACHED:
        _loaded.pop(next(iter(_loaded)))  # the oldest
    _loaded[key] = (stamp, text, table)
    return table


def load_table(arch: str, path=None) -> dict:
    """{family: {shape_key: Entry}} from ``path``, which must exist, or the arch's committed table, {} when
    there is none. A missing ``path``, or a malformed or non-UTF-8 file, raises ValueError naming the file
    (and the key: parse_table)."""
    return _copy(_table(arch, Path(path) if path else table_path(arch), must_exist=bool(path)))


def tuned_config(family: str, shape, arch: str) -> mla_decode.TileConfig:
    """The table's config for ``shape`` on ``arch``, else the family default."""
    default = _family(family)
    entry = _table(arch, table_path(arch), must_exist=False).get(family, {}).get(shape_key(shape))
    return entry.config if entry else default


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow=False, indentless=False):  # indent list items under their key
        return super().increase_indent(flow, False)


def _entry_yaml(entry: Entry, family: str) -> dict:
    _check_family(entry.config, family)
    shape = {name: getattr(entry.shape, name) for name in SHAPE_FIELDS}
    shape.update((name, getattr(entry.shape, name)) for name, (_, default) in OPTIONAL_SHAPE_FIELDS.items()
                 if getattr(entry.shape, name) != default)
    return {"shape": shape,
            "config": {name: getattr(entry.config, name) for name in TUNABLE},
            "measured": dict(entry.measured)}


def write_table(arch: str, family: str, entries, path=None) -> Path:
    """Replace ``family``'s entries in the table (other families kept), sorted by shape, atomically.
    The text is parsed back before it replaces the file, so a table that would not load is never written."""
    path = Path(path) if path else table_path(arch)
    tables = {name: list(rows.values()) for name, rows in _table(arch, path, must_exist=False).items()}
    tables[family] = sorted(entries, key=lambda e: shape_key(e.shape))
    families = {name: [_entry_yaml(e, name) for e in tables[name]] for name in sorted(tables)}
    try:
        text = HEADER.format(arch=arch_key(arch)) + yaml.dump(
            {"version": VERSION, "arch": arch_key(arch), "families": families}, Dumper=_Dumper, sort_keys=False,
            default_flow_style=None, width=1 << 16, allow_unicode=True)
        _parse(text, arch)
    except (_Malformed, ValueError, yaml.YAMLError) as e:  # YAMLError: a measured value YAML cannot hold
        raise ValueError(f"{path}: not written: {e}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_replace(path, text.encode())
    for key in [key for key in _loaded if key[0] == str(path)]:
        del _loaded[key]  # the stamp would tell, but a freed inode may come back
    return path


def candidate_impl(config: mla_decode.TileConfig) -> str:
    """The implementation name of one candidate config of its family."""
    config.check()
    _check_family(config, config.name)  # the name carries only the tunable fields
    spec = ".".join(f"{tag}{getattr(config, name)}" for name, tag in NAME_TAGS.items())
    return f"{TILELANG_PREFIX}{config.name}{CANDIDATE_MARK}{spec}"


# One spelling per value (no leading zeros, no signs), so a name and its config map one to one.
_VALUE = {int: re.compile(r"0|[1-9][0-9]*"), str: re.compile(r"[A-Za-z]+")}


def parse_candidate(impl: str) -> mla_decode.TileConfig | None:
    """The config a candidate name stands for; None for a plain name such as 'tilelang-hopper'."""
    if CANDIDATE_MARK not in impl:
        return None
    form = f"{TILELANG_PREFIX}<family>{CANDIDATE_MARK}" + ".".join(f"{tag}<{name}>" for name, tag in NAME_TAGS.items())
    family_name, _, spec = impl.removeprefix(TILELANG_PREFIX).partition(CANDIDATE_MARK)
    parts = spec.split(".")
    if not impl.startswith(TILELANG_PREFIX) or len(parts) != len(NAME_TAGS):
        raise ValueError(f"implementation {impl!r}: a candidate name reads {form}")
    try:
        family = _family(family_name)
    except ValueError as e:
        raise ValueError(f"implementation {impl!r}: {e}") from None
    values = {}
    for (name, tag), part in zip(NAME_TAGS.items(), parts):
        kind = type(getattr(family, name))
        text = part.removeprefix(tag)
        if not part.startswith(tag) or not _VALUE[kind].fullmatch(text):
            raise ValueError(f"implementation {impl!r}: {part!r} is not {tag}<{name}>; a candidate name reads {form}")
        values[name] = kind(text)
    config = family.with_(**values)
    try:
        config.check()
    except ValueError as e:
        raise ValueError(f"implementation {impl!r}: {e}") from None
    return config

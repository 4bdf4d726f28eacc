"""perf.yml's `tune:` section: per TileLang config family, the architecture it is tuned for and the search
space `mlagate tune` measures there. Checked as the rest of perf.yml is (mlagate/config/__init__.py): an unknown key
or a bad value is a ConfigError naming it."""

import itertools
from dataclasses import dataclass

from mlagate.config.reader import ConfigError, KeyReader, open_section_keys
from mlagate.kernels.tile_rules import FAMILY_ARCH, MAX_STAGES, MULTIPLE_OF, POLICIES

# The TileConfig fields a space may vary and the type of their values: kernels/tuned.py's TUNABLE, which
# this layer cannot import without tilelang (tests/test_tune.py checks that the two agree).
SPACE_FIELDS = {"block_N": int, "block_H": int, "num_split": int, "threads": int, "num_stages": int, "policy": str}
# num_split 0 is "fill the device", num_stages 0 no pipelining; TileConfig.check holds the full rules.
INT_MINIMUM = {"num_split": 0, "num_stages": 0}


@dataclass(frozen=True)
class TuneSpace:
    family: str  # a TileConfig family of kernels/mla_decode.py CONFIGS (the `tilelang-<family>` implementation)
    arch: str  # perf.yml's architecture name (sm_90, gfx942): the table's and the shared-memory limit's key
    space: tuple  # ((field, (value, ...)), ...) in perf.yml's order; fields not listed keep the family default

    def candidates(self, default) -> list:
        """Every combination of the space on the family's default TileConfig, the last field varying
        fastest. Each value passes TileConfig.check, or a ConfigError names its key."""
        for field, values in self.space:
            for value in values:
                try:
                    default.with_(**{field: value}).check()
                except ValueError as e:
                    raise ConfigError(f"tune.{self.family}.space.{field}: {value!r} is refused: {e}") from None
        fields = [field for field, _ in self.space]
        return [default.with_(**dict(zip(fields, combo)))
                for combo in itertools.product(*(values for _, values in self.space))]


def _values(space: KeyReader, field: str) -> tuple:
    """A space's values of ``field``, each refused by the kernel's own rules (kernels/tile_rules.py) at load."""
    if SPACE_FIELDS[field] is str:
        space.name_list(field)  # a number is "not a name" before it is "not a policy"
        return space.choice_list(field, POLICIES)
    return space.int_list(field, minimum=INT_MINIMUM.get(field, 1), multiple_of=MULTIPLE_OF.get(field),
                          maximum=MAX_STAGES if field == "num_stages" else None)


def parse(top: KeyReader, families, shared_memory_limit: dict) -> dict:
    """{family: TuneSpace} of the `tune:` section. ``families``: the TileLang config families perf.yml
    knows; ``shared_memory_limit``: gate.build's, whose architectures a family may be tuned for (the
    tune's resource pre-filter needs the limit)."""
    section = top.section("tune", open_section_keys(top.data.get("tune")))
    spaces = {}
    for family in section.data:
        if family not in families:
            raise ConfigError(f"tune.{family}: unknown config family (known: {', '.join(families)})")
        entry = section.section(family, ("arch", "space"))
        arch = entry.get("arch", str)
        if arch not in shared_memory_limit:
            raise ConfigError(f"tune.{family}.arch: {arch!r} has no gate.build.shared_memory_limit (known: "
                              f"{', '.join(shared_memory_limit)})")
        if arch != FAMILY_ARCH[family]:
            raise ConfigError(f"tune.{family}.arch: {arch!r} is not the {family} family's architecture "
                              f"({FAMILY_ARCH[family]})")
        space = entry.section("space", tuple(SPACE_FIELDS))
        if not space.data:
            raise ConfigError(f"tune.{family}.space: must list at least one of {', '.join(SPACE_FIELDS)}")
        spaces[family] = TuneSpace(family, arch, tuple((field, _values(space, field)) for field in space.data))
    return spaces

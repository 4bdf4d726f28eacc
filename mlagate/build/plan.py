"""What `mlagate build` lowers: the targets it accepts and the programs (jobs) of each.

Per (tile config, dtype, shape), a family's config as the committed table tunes it for the
shape: the split path (the plan's own split, or a forced split of FORCED_SPLIT where the
plan does not split) with its combine kernel, and the no-split path (num_split = 1).
Identical plans are planned once.
"""

import re
from dataclasses import dataclass

FORCED_SPLIT = 4
# Configs built per target kind by default. tilelang-hopper runs only on Hopper (impls.py: wgmma/TMA and
# 228 KB of shared memory); --config-name overrides. The seesaw is built on demand (--config-name seesaw
# --target cuda:sm_90a): each of its kernels takes ~15 s to lower, the full grid's 160 too long for CI.
DEFAULT_CONFIGS = {"cuda": ("hopper", "cdna3"), "hip": ("cdna3",)}


def build_shapes(sizes: dict, grid: str, dtypes) -> list:
    """The shapes `mlagate build --grid <grid>` lowers: the grid's points at one query token, and at each of its
    q_len > 1 the quick grid's points only. The full grid at q_len 1, 2 and 4 would triple CI's build step
    (`--grid full`, both targets); the quick grid's points (16 heads, the TP8-with-MTP shape) add 8 shapes to
    its 80. ``sizes``: perf.yml's grid sizes {name: (batches, seqlens, heads, q_lens)}."""
    from mlagate.kernels import mla_decode

    batches, seqlens, heads, q_lens = sizes[grid]
    quick = sizes["quick"]
    shapes = [mla_decode.Shape(b, s, h, d) for d in dtypes for h in heads for b in batches for s in seqlens]
    return shapes + [mla_decode.Shape(b, s, h, d, s_q=q) for q in q_lens if q > 1
                     for d in dtypes for h in quick[2] for b in quick[0] for s in quick[1]]


class BuildError(ValueError):
    """A target or toolchain the build cannot use; the message says what to do."""


@dataclass(frozen=True)
class Job:
    """One program to lower: a tile config (its num_split possibly forced) on one shape."""

    target: str
    arch: str
    config: object  # mla_decode.TileConfig
    shape: object  # mla_decode.Shape
    forced: bool

    @property
    def kind(self) -> str:
        """'cuda' or 'hip'."""
        return self.target.split(":")[0]

    def plan(self):
        from mlagate.kernels import mla_decode

        return mla_decode.plan(self.shape, self.config, self.arch)


def parse_target(target: str) -> tuple:
    """'cuda:sm_90a' -> ('cuda', 'sm_90a'); the arch is what tilelang targets."""
    from mlagate.kernels import mla_decode

    kind, _, arch = target.partition(":")
    # a name tilelang can target: sm_ and digits (a: the arch-specific variant), gfx and its hex digits
    if kind not in ("cuda", "hip") or not re.fullmatch(r"sm_\d{2,3}a?|gfx[0-9a-f]{3,4}", arch):
        raise BuildError(f"--target {target!r}: expected cuda:<sm_XX> or hip:<gfxNNN>")
    t = mla_decode.target_for(arch)
    if t["kind"] != kind:
        raise BuildError(f"--target {target!r}: {arch} is a {t['kind']} architecture")
    return kind, t.get("arch") or t.get("mcpu")


def config_that_runs(config, shape, arch: str):
    """A family config (mla_decode.CONFIGS) runs, per shape, the committed table's config
    (kernels/tuned/<arch>.yaml), so a PR that edits a table is built too; any other as given."""
    from mlagate.kernels import mla_decode, tuned

    if mla_decode.CONFIGS.get(config.name) == config:
        return tuned.tuned_config(config.name, shape, arch)
    return config


def plan_jobs(target: str, configs, shapes) -> list:
    """The split and the no-split program of every (config, shape), each plan once."""
    _, arch = parse_target(target)
    jobs, seen = [], set()
    for family_config in configs:
        for shape in shapes:
            config = config_that_runs(family_config, shape, arch)
            auto = Job(target, arch, config, shape, False)
            splits = auto.plan().num_split > 1
            split = auto if splits else Job(target, arch, config.with_(num_split=FORCED_SPLIT), shape, True)
            no_split = Job(target, arch, config.with_(num_split=1), shape, splits)
            for job in (split, no_split):
                p = job.plan()
                key = (p.shape, p.num_split, p.split_len, p.block_H, job.config.with_(num_split=0))
                if key not in seen:
                    seen.add(key)
                    jobs.append(job)
    return jobs

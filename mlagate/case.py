"""A measured case: what was measured (Case), and its identity across commits (its key)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    impl: str
    batch: int
    seqlen: int
    dtype: str
    heads: int = 128

    @property
    def key(self) -> tuple:
        """Identity of a case across commits (impl, batch, seqlen, dtype, heads)."""
        return (self.impl, self.batch, self.seqlen, self.dtype, self.heads)

    def label(self) -> str:
        return case_label(self.key)


def case_label(key: tuple) -> str:
    impl, batch, seqlen, dtype, heads = key
    return f"{impl} h={heads} b={batch} s={seqlen} {dtype}"

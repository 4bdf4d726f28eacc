"""Grid points and which runner records one: a stable hash, the same split on every run,
machine and Python (`mlagate record --shard I/N`, `mlagate results merge`)."""

import hashlib

from mlagate.case import Case


def point(case: Case) -> tuple:
    """A grid point: what every implementation of one problem shares."""
    return case.batch, case.seqlen, case.dtype, case.heads, case.q_len, case.kv_dtype, case.workload


def runner_shard(case: Case, shards: int) -> int:
    """Which of ``shards`` runners (0-based) records a case: a stable hash of its grid point, so
    every implementation of a point lands on one runner (same-GPU ratios) and the split is the
    same on every run, machine and Python."""
    # as before q_len (one token), kv_dtype (the query's) and workloads (dense), so old points keep their runner
    batch, seqlen, dtype, heads, q_len, kv_dtype, workload = point(case)
    parts = (batch, seqlen, dtype, heads) + ((f"s_q={q_len}",) if q_len != 1 else ()) \
        + ((f"kv={kv_dtype}",) if kv_dtype != dtype else ()) + ((workload,) if case.paged else ())
    text = ",".join(map(str, parts))
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % shards


def parse_shard(text: str) -> tuple:
    """'I/N' (1 <= I <= N) -> (I - 1, N); ValueError naming --shard otherwise."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except (AttributeError, ValueError):
        raise ValueError(f"--shard must be I/N (e.g. 2/4), got {text!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: I must be between 1 and N")
    return i - 1, n

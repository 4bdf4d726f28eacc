"""Before a record on several GPUs: the same case on each GPU at once, compared (measure -> decide).

The case is the platform's gated TileLang config at the quick grid's largest point. A flagged GPU
is reported and kept in the record's environment (every report shows it); the record goes on:
each grid point is dealt to the same GPU on every commit, so a GPU's own offset cancels between
base and head, and the check says when that GPU is off by more than the gate resolves.
"""

import statistics
from dataclasses import asdict

from mlagate.case import RunStatus
from mlagate.config import Config
from mlagate.decide.consistency import compare_gpus


def check_gpus(cfg: Config, gpus_text: str | None, echo=print) -> dict | None:
    """{"case", "screen", "gpus": [GpuReading as dict]} for two or more GPUs; None for one."""
    from mlagate.measure import environment, grid

    gpus = grid.parse_gpus(gpus_text)
    if not gpus or len(gpus) < 2:
        return None
    here = environment.platform()
    case = max(cfg.cases("quick", [cfg.platform(here).tilelang], here), key=grid.estimated_cost)
    echo(f"GPU consistency: {case.label()} on GPUs {', '.join(map(str, gpus))} at once")
    results = grid.run_on_each(case, cfg.timing, gpus)
    bad = [f"GPU {gpu}: {r.reason}" for gpu, r in zip(gpus, results) if r.status != RunStatus.OK]
    if bad:
        raise ValueError(f"GPU consistency check failed ({case.label()}): {'; '.join(bad)}; nothing was recorded")
    readings = compare_gpus({gpu: statistics.median(r.samples.times_ms) / 1e3 for gpu, r in zip(gpus, results)},
                            cfg.gate.screen, {gpu: r.samples.uuid for gpu, r in zip(gpus, results)})
    for r in readings:
        echo(f"  GPU {r.gpu} {r.uuid[:13]}: {r.median_s * 1e6:.1f} µs, {r.off:+.2%} against the others"
             + (f"  FLAGGED (more than the screen, {cfg.gate.screen:.2%})" if r.flagged else ""))
    return {"case": case.label(), "screen": cfg.gate.screen, "gpus": [asdict(r) for r in readings]}

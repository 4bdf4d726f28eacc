"""`mlagate calibrate`: the gate's detection rate against injected slowdowns, on recorded GPU noise."""

import json
from pathlib import Path

from mlagate import exits


def add_parser(sub):
    p = sub.add_parser("calibrate", help="detection rate vs injected slowdown on recorded GPU noise")
    p.add_argument("--noise", default="tests/fixtures/h200/noise_study_2026-11-29.json",
                   help="rounds of samples per case (lab/noise_study.py output)")
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--ladder", default=None, help="a real ladder (`mlagate ladder`'s ladder.json) to plot beside")
    p.add_argument("--out", default=None, help="folder for calibration.json and calibration.png")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.decide import calibration
    from mlagate.report import plots, text

    measured = ladder_points(Path(args.ladder)) if args.ladder else ()  # before anything is written
    data = json.loads(Path(args.noise).read_text())
    g = cfg.gate
    slowdowns = [i / 100 for i in range(0, 11)]
    budgets = cfg.timing.budgets
    share = budgets["confirm"].windows / budgets["record"].windows
    curves = {}
    for label, recorded in data.items():
        rounds = recorded["samples"]
        per_side = min(g.confirm_rounds, (len(rounds) - 2) // 2)
        curves[label] = calibration.detection_curve(rounds, slowdowns, screen=g.screen, threshold=g.threshold,
                                                    alpha=g.alpha, confirm_rounds=per_side, confirm_share=share,
                                                    trials=args.trials)
    print(text.calibration_markdown(curves, g))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "calibration.json").write_text(json.dumps(curves, indent=1))
        plots.calibration_plot(curves, out / "calibration.png", threshold=g.threshold, measured=measured)
        print(f"wrote {out / 'calibration.json'} and {out / 'calibration.png'}")
    at = {label: dict((round(s, 2), failed) for s, _, failed in c) for label, c in curves.items()}
    ok = all(a[0.05] >= 0.95 and a[0.0] <= 0.01 for a in at.values())
    return exits.OK if ok else exits.OFF_TARGET


LADDER_ROW = ("label", "step", "injected", "status")


def ladder_points(path: Path) -> list:
    """A ladder.json's points for the plot; ValueError naming the file unless `mlagate ladder` wrote it."""
    from mlagate.ladder import rules as ladder

    try:
        doc = json.loads(path.read_text())
    except ValueError as e:  # not JSON, or not UTF-8
        raise ValueError(f"{path}: not a ladder.json ({e})") from None
    table = doc.get("table") if isinstance(doc, dict) else None
    if not isinstance(table, list) or not all(isinstance(r, dict) and all(k in r for k in LADDER_ROW) for r in table):
        raise ValueError(f"{path}: not a ladder.json (a table of rows with {', '.join(LADDER_ROW)}, "
                         "as `mlagate ladder` writes it)")
    return ladder.fail_shares(table)


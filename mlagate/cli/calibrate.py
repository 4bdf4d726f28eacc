"""`mlagate calibrate`: the gate's detection rate against injected slowdowns, on recorded GPU noise."""

import json
from pathlib import Path

from mlagate import exits
from mlagate.atomic import check_output_folder, output_set
from mlagate.json_reader import out_of_bounds


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

    if args.out:
        check_output_folder(args.out)  # before the trials: --out is replaced whole at the end
    if args.trials < 1:
        raise ValueError(f"--trials: must be at least 1, got {args.trials}")
    measured = ladder_points(Path(args.ladder)) if args.ladder else ()  # before anything is written
    data = noise_rounds(Path(args.noise))
    g = cfg.gate
    slowdowns = [i / 100 for i in range(0, 11)]
    budgets = cfg.timing.budgets
    share = budgets["confirm"].windows / budgets["record"].windows
    curves = {}
    for label, rounds in data.items():
        per_side = min(g.confirm.min_rounds, (len(rounds) - 2) // 2)
        curves[label] = calibration.detection_curve(rounds, slowdowns, screen=g.screen, threshold=g.threshold,
                                                    alpha=g.alpha, confirm_rounds=per_side, confirm_share=share,
                                                    trials=args.trials)
    print(text.calibration_markdown(curves, g))
    if args.out:
        out = Path(args.out)
        with output_set(out) as fresh:  # the curves and their plot, replaced as one set
            (fresh / "calibration.json").write_text(json.dumps(curves, indent=1))
            plots.calibration_plot(curves, fresh / "calibration.png", threshold=g.threshold, measured=measured)
        print(f"wrote {out / 'calibration.json'} and {out / 'calibration.png'}")
    at = {label: dict((round(s, 2), failed) for s, _, failed in c) for label, c in curves.items()}
    ok = all(a[0.05] >= 0.95 and a[0.0] <= 0.01 for a in at.values())
    return exits.OK if ok else exits.OFF_TARGET


LADDER_ROW = ("label", "step", "injected", "status")


def ladder_points(path: Path) -> list:
    """A ladder.json's points for the plot; ValueError naming the file unless `mlagate ladder` wrote it."""
    from mlagate.json_reader import load
    from mlagate.ladder import rules as ladder

    doc = load(path, "a ladder.json")
    table = doc.get("table") if isinstance(doc, dict) else None
    if not isinstance(table, list) or not all(isinstance(r, dict) and all(k in r for k in LADDER_ROW) for r in table):
        raise ValueError(f"{path}: not a ladder.json (a table of rows with {', '.join(LADDER_ROW)}, "
                         "as `mlagate ladder` writes it)")
    for i, row in enumerate(table):
        if not isinstance(row["label"], str) or not isinstance(row["status"], str):
            raise ValueError(f"{path}: table[{i}]: label and status must be names")
        for key in ("step", "injected"):  # injected: null where the step was not calibrated
            if (row[key] is not None or key == "step") and out_of_bounds(row[key], -100.0, 1000.0):
                raise ValueError(f"{path}: table[{i}].{key}: {row[key]!r:.40} is not a finite number")
    return ladder.fail_shares(table)


def noise_rounds(path: Path) -> dict:
    """{label: rounds of per-call times in ms} of a noise file (notes/noise_study.py's); ValueError naming the
    file and key unless every round is a list of times within json_reader's physical bounds."""
    from mlagate.json_reader import LATENCY_CEILING_S, LATENCY_FLOOR_S, load

    data = load(path, "a noise study")
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: not a noise study (a mapping of case labels to rounds of samples), got "
                         f"{type(data).__name__}")
    low, high = LATENCY_FLOOR_S * 1e3, LATENCY_CEILING_S * 1e3  # the file's times are in ms
    rounds = {}
    for label, recorded in data.items():
        samples = recorded.get("samples") if isinstance(recorded, dict) else None
        if not isinstance(samples, list) or len(samples) < 2 or not all(isinstance(r, list) and r for r in samples):
            raise ValueError(f"{path}: {label}.samples: must be at least 2 rounds, each a list of times (ms)")
        for i, r in enumerate(samples):
            bad = next((t for t in r if out_of_bounds(t, low, high)), "none")
            if bad != "none":
                raise ValueError(f"{path}: {label}.samples[{i}]: {bad!r:.40} is not a time in [{low:g}, {high:g}] ms")
        rounds[label] = samples
    return rounds


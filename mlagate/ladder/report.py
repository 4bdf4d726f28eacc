"""`mlagate ladder`'s table (Markdown) and plot (PNG): measured change against the injected one."""

from mlagate.decide.vocabulary import Status
from mlagate.ladder.rules import TOLERANCE_PP, step_name
from mlagate.report.text import ICON


def _pct(value, spec="+.2f") -> str:
    return "–" if value is None else f"{format(value * 100, spec)}%"


def _pp(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def _verdict(status: str) -> str:
    try:
        return ICON[Status(status)]
    except ValueError:  # "missing": the case is not in the gate's verdict
        return status


def markdown(doc: dict) -> str:
    gate = doc["gate"]
    lines = [f"## mlagate ladder {doc['run_id']}: base `{doc['base'][:10]}`, {doc['reps']} repetition(s), "
             f"{doc['grid']} grid, machine `{doc['machine']}`", "",
             "Injected: a spin of GPU clock cycles at the start of every block of the TileLang decode kernel, of "
             "the cycles that add the step's share of the case's own median; its value is the step commit's "
             "kernel measured against base's on the GPU (calibration.json). Recorded: the gate's change between the "
             "records (head/base median − 1); re-measured: its interleaved re-measure (– where the gate did not "
             "re-measure the case), in how many alternated rounds it decided. Off: |measured − injected| in "
             "percentage points. Detectable: the smallest slowdown the samples that decided (the re-measure's, else "
             "the records') would show at the gate's alpha with 80% power. "
             f"Gate: screen {gate['screen']:+.2%}, threshold {gate['threshold']:+.2%}.", "",
             "| rep | step | case | injected | recorded | re-measured | rounds | off, recorded (pp) | "
             "off, re-measured (pp) | detectable | verdict |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["table"]:
        rounds = "–" if r.get("rounds") is None else r["rounds"]
        lines.append(f"| {r['rep']} | {step_name(r['step'])}% | {r['label']} | {_pct(r['injected'])} | "
                     f"{_pct(r['recorded'])} | {_pct(r['confirmed'])} | {rounds} | {_pp(r['recorded_pp'])} | "
                     f"{_pp(r['confirmed_pp'])} | {_pct(r.get('detectable'), '.2f')} | {_verdict(r['status'])} |")
    lines += ["", "### Per step, over every repetition", "",
              f"| step | case runs | pass | fail | unsure | other | injected | max off, recorded (pp) | "
              f"max off, re-measured (pp) | within ±{TOLERANCE_PP:g} pp |",
              "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for s in doc["summary"]:
        low, high = _pct(s["injected_min"]), _pct(s["injected_max"])
        lines.append(f"| {step_name(s['step'])}% | {s['n']} | {s['pass']} | {s['fail']} | {s.get('unsure', 0)} | "
                     f"{s['other']} | "
                     f"{low if low == high else f'{low} … {high}'} | {_pp(s['max_recorded_pp'])} | "
                     f"{_pp(s['max_confirmed_pp'])} | {s['within']} of {s['measured']} |")
    if doc.get("untouched"):
        lines += ["", "### Gated cases no step touches: the runner's noise floor", "",
                  "The changes the gate recorded and re-measured, step after step, for kernels the spin never "
                  "reaches (another workload's kernel): what the same code reads from one record to the next on "
                  "this runner. Its rms also read with each window's SM clock (decide/clock_compare.py): every time "
                  "scaled by its window's clock (normalized), and within the clocks both records read (binned); "
                  "– where the records kept no per-window clocks.", "",
                  "| case | records | max \\|recorded\\| (pp) | rms, recorded (pp) | rms, clock-normalized (pp) | "
                  "rms, within clock bins (pp) | re-measured | "
                  f"max \\|re-measured\\| (pp) | within ±{TOLERANCE_PP:g} pp | failed |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for u in doc["untouched"]:
            lines.append(f"| {u['label']} | {u['n']} | {_pp(u['max_pp'])} | {_pp(u['rms_pp'])} | "
                         f"{_pp(u.get('rms_normalized_pp'))} | {_pp(u.get('rms_binned_pp'))} | {u['confirmed']} | "
                         f"{_pp(u['max_confirmed_pp'])} | {u['within']} of {u['measured']} | {u['fail']} |")
    errors = [(r["rep"], r["step"], e) for r in doc["steps_run"] for e in r.get("errors", [])]
    if errors:
        lines += ["", "Gate errors:", *[f"- rep {rep}, step {step_name(step)}%: {e}" for rep, step, e in errors]]
    return "\n".join(lines) + "\n"


def plot_png(path, doc: dict) -> None:
    """Measured against injected change per case (recorded: circles, confirmed: crosses), the line
    y = x with its ±TOLERANCE_PP band, and the gate's screen and threshold."""
    from mlagate.report.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.5), layout="constrained")
    labels = list(dict.fromkeys(r["label"] for r in doc["table"]))
    for i, label in enumerate(labels):
        mine = [r for r in doc["table"] if r["label"] == label and r["injected"] is not None]
        for key, marker, name in (("recorded", "o", "recorded"), ("confirmed", "x", "confirmed")):
            pts = [(r["injected"] * 100, r[key] * 100) for r in mine if r[key] is not None]
            if pts:
                ax.scatter(*zip(*pts), marker=marker, color=f"C{i}", s=36, label=f"{label}: {name}",
                           facecolors="none" if marker == "o" else None)
    values = [v * 100 for r in doc["table"] for v in (r["injected"], r["recorded"], r["confirmed"]) if v is not None]
    low, high = min([0.0, *values]) - 0.5, max([1.0, *values]) + 1.0
    line = [low, high]
    ax.plot(line, line, color="k", lw=1, label="measured = injected")
    ax.fill_between(line, [v - TOLERANCE_PP for v in line], [v + TOLERANCE_PP for v in line], color="grey",
                    alpha=0.2, label=f"±{TOLERANCE_PP:g} pp")
    gate = doc["gate"]
    ax.axvline(gate["screen"] * 100, color="dimgrey", ls=":", lw=1, label=f"gate screen {gate['screen']:.2%}")
    ax.axvline(gate["threshold"] * 100, color="C3", ls="--", lw=1, label=f"gate threshold {gate['threshold']:.1%}")
    ax.set(xlim=line, ylim=line, xlabel="injected slowdown (%)", ylabel="measured change (%)",
           title=f"mlagate ladder {doc['run_id']}\n{doc['reps']} repetition(s), {doc['grid']} grid, base "
                 f"{doc['base'][:10]}")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=7)
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)

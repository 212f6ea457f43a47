#!/usr/bin/env python3
"""The pre-registered analysis of the real-model aggregation study (docs/study-real/preregistration.md).

    scripts/study_real_analysis.py DOCS_DIR RUNS_DIR > analysis.json
    scripts/study_real_analysis.py --report analysis.json > report.md

DOCS_DIR holds the committed per-run held-out samples (`A-<rule>-seed<S>-{start,end}.samples.jsonl.gz`);
RUNS_DIR is the comparison directory of the main runs (`runs/study-real/main`, or the same
files unpacked from `docs/study-real/runs.tar.gz`), whose `runs/<task>/<rule>-seed<S>/` hold
`metrics.jsonl` and `eval.jsonl`. The first form writes every number the write-up uses and the
verdicts of the pre-registered rules; the second turns that JSON into the report's tables.
Standard library only, deterministic. The statistics (t intervals, the exact sign-flip p, Holm)
are the second study's, imported from scripts/study2_analysis.py.
"""

import gzip
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study2_analysis as stats  # noqa: E402  (the shared statistics)

# ---- pre-registered constants (docs/study-real/preregistration.md) ----
RULES = ("token", "seq", "ba", "token-group")
OTHERS = ("token", "seq", "token-group")
SEEDS = tuple(range(8))
STEPS = 40
EVAL_STEPS = (10, 20, 30, 40)
ALPHA = 0.05
INERT = 0.03  # a contrast whose whole interval lies inside (-0.03, +0.03) is inert
MANIPULATION = (1, 10)  # steps of M1
TRUNC_EARLY = (1, 5)  # steps of M2
UNINFORMATIVE = (0.9, 1.1)  # M1 inside this: the setting says little about the mechanism
EVENTS = {"acc_drop": 0.10, "entropy_floor": 0.3, "len_high": 2.0, "after": 5,
          "trunc_abs": 0.3, "trunc_rel": 2.0, "grad_spike": 5.0}
NAMES = {"token-group": "prompt-mean (token-group)"}


def samples(path):
    """problem id -> correct, from a `fulcrum eval --samples` file (greedy: one response each)."""
    out = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            s = r.get("scored", r)
            out[s["id"]] = bool(s["correct"])
    return out


def window(metrics, lo, hi, key):
    return stats.mean([m.get(key) for m in metrics if lo <= m["step"] <= hi])


def events(metrics, evals):
    """The pre-registered stability events E1-E5 of one run (True where it happened)."""
    acc = {e["step"]: e["accuracy"] for e in evals}
    best = max(acc.values()) if acc else None
    first = metrics[0] if metrics else {}
    after = [m for m in metrics if m["step"] > EVENTS["after"]]
    grads = sorted(m["grad/norm"] for m in metrics if m.get("grad/norm") is not None)
    median = grads[len(grads) // 2] if grads else None
    e0 = first.get("entropy/mean")
    l0 = first.get("len/mean")
    t0 = first.get("len/truncated_frac") or 0.0
    return {
        "E1": best is not None and STEPS in acc and acc[STEPS] <= best - EVENTS["acc_drop"] + 1e-12,
        "E2": bool(e0) and any((m.get("entropy/mean") or e0) < EVENTS["entropy_floor"] * e0 for m in metrics),
        "E3": bool(l0) and any((m.get("len/mean") or 0) > EVENTS["len_high"] * l0 for m in after),
        "E4": any((m.get("len/truncated_frac") or 0) > max(EVENTS["trunc_abs"], EVENTS["trunc_rel"] * t0)
                  for m in after),
        "E5": any(m.get("skipped") for m in metrics)
        or (median is not None and median > 0 and any(g > EVENTS["grad_spike"] * median for g in grads)),
    }


def load(docs, runs_dir):
    """Every main run's measures, keyed (rule, seed)."""
    out = {}
    for run in sorted(Path(runs_dir).glob("runs/*/*-seed*")):
        rule, seed = run.name.rsplit("-seed", 1)
        if rule not in RULES or int(seed) not in SEEDS:
            continue
        seed = int(seed)
        metrics = stats.read_jsonl(run / "metrics.jsonl")
        evals = [e for e in stats.read_jsonl(run / "eval.jsonl") if e.get("phase") in (None, "start")]
        acc = {e["step"]: e["accuracy"] for e in evals}
        if not (run / "summary.json").exists() or STEPS not in acc:
            continue  # unfinished
        end = Path(docs) / f"A-{rule}-seed{seed}-end.samples.jsonl.gz"
        per_problem = samples(end) if end.exists() else None
        out[(rule, seed)] = {
            "final": acc[STEPS],
            "auc": stats.mean([acc.get(s) for s in EVAL_STEPS]),
            "curve": {str(s): acc.get(s) for s in (0,) + EVAL_STEPS},
            "m1": window(metrics, *MANIPULATION, "mass_ratio/token"),
            "m2": window(metrics, *TRUNC_EARLY, "len/truncated_frac"),
            "events": events(metrics, evals),
            "dynamics": {k: [m.get(k) for m in metrics] for k in (
                "len/pos_mean", "len/neg_mean", "len/truncated_frac", "entropy/mean", "reward/mean")},
            "early": {k: window(metrics, *MANIPULATION, k) for k in (
                f"mass_ratio/{rule}", f"trunc_share/{rule}", "len/cv_side")},
            "samples_final": (sum(per_problem.values()) / len(per_problem)) if per_problem else None,
            "problems": per_problem,
        }
    return out


def contrast(runs, other, key):
    d = [runs[("ba", s)][key] - runs[(other, s)][key]
         for s in SEEDS if ("ba", s) in runs and (other, s) in runs]
    out = stats.mean_ci(d) or {"mean": None, "lo": None, "hi": None, "n": 0}
    out["p_t"] = stats.t_test_p(d)
    out["p_perm"] = stats.sign_flip_p(d)
    out["diffs"] = d
    return out


def verdict(c):
    if c.get("lo") is None:
        return "undecided"
    if c["p_holm"] is not None and c["p_holm"] < ALPHA and c["lo"] > 0:
        return "better"
    if c["p_holm"] is not None and c["p_holm"] < ALPHA and c["hi"] < 0:
        return "worse"
    if -INERT < c["lo"] and c["hi"] < INERT:
        return "inert"
    return "undecided"


def claim(verdicts):
    vs = list(verdicts.values())
    if any(v == "worse" for v in vs):
        return "refuted"
    if all(v == "better" for v in vs):
        return "supported"
    if any(v == "better" for v in vs):
        return "partly supported"
    if all(v == "inert" for v in vs):
        return "inert"
    return "undecided"


def mcnemar(runs, other):
    """Over every seed: problems solved at step 40 by ba only, and by the other rule only."""
    only_ba = only_other = 0
    for s in SEEDS:
        a, b = runs.get(("ba", s)), runs.get((other, s))
        if not a or not b or a["problems"] is None or b["problems"] is None:
            continue
        for pid, ok in a["problems"].items():
            o = b["problems"].get(pid)
            only_ba += ok and not o
            only_other += (not ok) and bool(o)
    return {"only_ba": only_ba, "only_other": only_other}


def analyse(docs, runs_dir):
    runs = load(docs, runs_dir)
    primary = {r: contrast(runs, r, "final") for r in OTHERS}
    adjusted = stats.holm([primary[r]["p_t"] if primary[r]["p_t"] is not None else 1.0 for r in OTHERS])
    for r, p in zip(OTHERS, adjusted):
        primary[r]["p_holm"] = p
        primary[r]["verdict"] = verdict(primary[r])
    m1 = stats.mean_ci([v["m1"] for v in runs.values()])
    by_rule = {}
    for rule in RULES:
        mine = [v for (r, _), v in runs.items() if r == rule]
        by_rule[rule] = {
            "runs": len(mine),
            "final": stats.mean_ci([v["final"] for v in mine]),
            "auc": stats.mean_ci([v["auc"] for v in mine]),
            "curve": {s: stats.mean([v["curve"][s] for v in mine]) for s in ("0", "10", "20", "30", "40")},
            "events": {e: sum(v["events"][e] for v in mine) for e in ("E1", "E2", "E3", "E4", "E5")},
            "early": {k: stats.mean([v["early"][f"{k}/{rule}" if k != "len/cv_side" else k] for v in mine])
                      for k in ("mass_ratio", "trunc_share", "len/cv_side")},
            "dynamics": {k: [stats.mean([v["dynamics"][k][i] for v in mine if len(v["dynamics"][k]) > i])
                             for i in range(STEPS)]
                         for k in ("len/pos_mean", "len/neg_mean", "len/truncated_frac", "entropy/mean")},
            "samples_agree": all(v["samples_final"] is None or abs(v["samples_final"] - v["final"]) < 1e-9
                                 for v in mine),
        }
    return {
        "runs": len(runs),
        "missing": [f"{r}-seed{s}" for r in RULES for s in SEEDS if (r, s) not in runs],
        "manipulation": {
            "m1_mass_ratio_token_steps_1_10": m1,
            "m2_truncated_steps_1_5": stats.mean_ci([v["m2"] for v in runs.values()]),
            "informative": m1 is not None and not (UNINFORMATIVE[0] <= m1["mean"] <= UNINFORMATIVE[1]),
        },
        "primary": primary,
        "claim": claim({r: primary[r]["verdict"] for r in OTHERS}),
        "secondary": {
            "auc": {r: contrast(runs, r, "auc") for r in OTHERS},
            "per_problem": {r: mcnemar(runs, r) for r in OTHERS},
        },
        "by_rule": by_rule,
        "per_run": {f"{r}-seed{s}": {k: v[k] for k in ("final", "auc", "curve", "m1", "m2", "events")}
                    for (r, s), v in sorted(runs.items())},
    }


# ---- the report ----
def pct(x, signed=False):
    if x is None:
        return "-"
    return f"{x * 100:+.1f}" if signed else f"{x * 100:.1f}"


def p(x):
    return "-" if x is None else (f"{x:.3f}" if x >= 0.001 else f"{x:.1e}")


def report(a):
    out = ["# Real-model aggregation study: report", "",
           f"{a['runs']} finished main runs" + (f"; missing: {', '.join(a['missing'])}" if a["missing"] else "") + ".",
           "Generated by `scripts/study_real_analysis.py --report` from `analysis.json`; accuracies in points.", ""]
    m = a["manipulation"]
    m1 = m["m1_mass_ratio_token_steps_1_10"] or {}
    m2 = m["m2_truncated_steps_1_5"] or {}
    out += ["## Manipulation check", "",
            f"- M1, token's mass ratio over steps 1-10: {m1.get('mean', float('nan')):.3f} "
            f"(95% CI {m1.get('lo') or float('nan'):.3f} .. {m1.get('hi') or float('nan'):.3f}); "
            f"{'informative' if m['informative'] else 'uninformative (inside 0.9-1.1)'}.",
            f"- M2, truncated fraction over steps 1-5: {m2.get('mean', float('nan')):.3f}.", ""]
    out += ["## Primary: held-out greedy accuracy at step 40, paired by seed", "",
            "| contrast | mean | 95% CI | p (t) | p (sign-flip) | p (Holm) | verdict |",
            "|---|---|---|---|---|---|---|"]
    for r in OTHERS:
        c = a["primary"][r]
        out.append(f"| ba − {NAMES.get(r, r)} | {pct(c['mean'], True)} | {pct(c['lo'], True)} .. {pct(c['hi'], True)} "
                   f"| {p(c['p_t'])} | {p(c['p_perm'])} | {p(c['p_holm'])} | **{c['verdict']}** |")
    out += ["", f"**Claim (BA ends better on a real model): {a['claim']}.**", ""]
    out += ["## By rule", "",
            "| rule | runs | accuracy at 0 / 10 / 20 / 30 / 40 | final (95% CI) | AUC (95% CI) | events E1-E5 | token-style mass ratio, own (steps 1-10) | share on truncated (steps 1-10) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in RULES:
        b = a["by_rule"][r]
        curve = " / ".join(pct(b["curve"][s]) for s in ("0", "10", "20", "30", "40"))
        f, u = b["final"] or {}, b["auc"] or {}
        ev = " ".join(f"{k}:{v}" for k, v in b["events"].items())
        out.append(f"| {NAMES.get(r, r)} | {b['runs']} | {curve} | {pct(f.get('mean'))} ({pct(f.get('lo'))} .. {pct(f.get('hi'))}) "
                   f"| {pct(u.get('mean'))} ({pct(u.get('lo'))} .. {pct(u.get('hi'))}) | {ev} "
                   f"| {b['early']['mass_ratio'] if b['early']['mass_ratio'] is None else round(b['early']['mass_ratio'], 3)} "
                   f"| {b['early']['trunc_share'] if b['early']['trunc_share'] is None else round(b['early']['trunc_share'], 3)} |")
    out += ["", "## Secondary", "", "| contrast | AUC difference (95% CI) | problems solved by ba only / by the other only (8 seeds) |", "|---|---|---|"]
    for r in OTHERS:
        c = a["secondary"]["auc"][r]
        q = a["secondary"]["per_problem"][r]
        out.append(f"| ba − {NAMES.get(r, r)} | {pct(c['mean'], True)} ({pct(c['lo'], True)} .. {pct(c['hi'], True)}) "
                   f"| {q['only_ba']} / {q['only_other']} |")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        sys.stdout.write(report(json.loads(Path(sys.argv[2]).read_text())))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    json.dump(analyse(sys.argv[1], sys.argv[2]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The pre-registered analysis of the second aggregation study (docs/study/preregistration.md).

Usage: scripts/study2_analysis.py [STUDY_DIR]   (default runs/study2) > analysis.json

Reads every run directory under STUDY_DIR/<phase>/runs/<task>/<rule>-seed<S>/ (config.toml,
metrics.jsonl, eval.jsonl) and writes one JSON object: per-run measures, the manipulation checks,
paired contrasts per cell (mean, 95% t interval, exact sign-flip permutation p), the pooled
contrasts with Holm's correction, the mechanism tests (loop suppression, side-balance dose), the
stress regime's collapse counts, the token - seq regression pooled with the first study
(docs/study/first-study-points.json), and the primary tests' verdicts. The claim verdicts and
the markdown tables come from scripts/study2_report.py, which reads this file's output.
Standard library only (the study machine has no numpy), deterministic.
"""

import itertools
import json
import math
import sys
import tomllib
from pathlib import Path

# ---- pre-registered constants (docs/study/preregistration.md, "Decision rules") ----
ALPHA = 0.05
EQUIV = 0.02  # an effect inside +-2 accuracy points is "inert" when its interval lies inside it
EARLY = (1, 20)  # steps of the manipulation checks
COLLAPSE = {
    "entropy_floor": 0.3,
    "len_high": 1.5,
    "len_low": 0.6,
    "trunc_abs": 0.3,
    "trunc_rel": 2.0,
    "acc_drop": 0.10,
    "grad_spike": 5.0,
    "window": 5,
}
CELLS = ("C0", "CV", "LOOP", "BOTH")


# ---- small statistics, standard library only ----
def mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def sd(xs):
    m = mean(xs)
    if m is None or len(xs) < 2:
        return None
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def t_cdf(t, df):
    """Student t CDF through the regularized incomplete beta (continued fraction)."""
    x = df / (df + t * t)
    ib = _betainc(df / 2.0, 0.5, x)
    return 1.0 - 0.5 * ib if t > 0 else 0.5 * ib


def _betainc(a, b, x):
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a, b, x):
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def t_quantile(p, df):
    lo, hi = -50.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_ci(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None
    m, n = mean(xs), len(xs)
    if n < 2:
        return {"mean": m, "lo": None, "hi": None, "n": n}
    half = t_quantile(1 - ALPHA / 2, n - 1) * sd(xs) / math.sqrt(n)
    return {"mean": m, "lo": m - half, "hi": m + half, "n": n}


def sign_flip_p(diffs):
    """Exact two-sided sign-flip permutation p of the mean (all 2^n flips)."""
    diffs = [d for d in diffs if d is not None and math.isfinite(d)]
    n = len(diffs)
    if n == 0:
        return None
    obs = abs(sum(diffs))
    hits = 0
    for signs in itertools.product((1, -1), repeat=n):
        if abs(sum(s * d for s, d in zip(signs, diffs))) >= obs - 1e-12:
            hits += 1
    return hits / 2**n


def holm(ps):
    """Holm-adjusted p-values, in the input order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adj, running = [None] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adj[i] = running
    return adj


def ols(rows):
    """Least squares y ~ X (X rows include the intercept column): coefficients and 95% CIs."""
    n, k = len(rows), len(rows[0][0])
    if n <= k:
        return None
    xtx = [[sum(r[0][i] * r[0][j] for r in rows) for j in range(k)] for i in range(k)]
    xty = [sum(r[0][i] * r[1] for r in rows) for i in range(k)]
    inv = _invert(xtx)
    if inv is None:
        return None
    beta = [sum(inv[i][j] * xty[j] for j in range(k)) for i in range(k)]
    resid = [r[1] - sum(b * x for b, x in zip(beta, r[0])) for r in rows]
    s2 = sum(e * e for e in resid) / (n - k)
    q = t_quantile(1 - ALPHA / 2, n - k)
    ybar = mean([r[1] for r in rows])
    sst = sum((r[1] - ybar) ** 2 for r in rows)
    out = []
    for i in range(k):
        se = math.sqrt(max(s2 * inv[i][i], 0.0))
        out.append({"coef": beta[i], "lo": beta[i] - q * se, "hi": beta[i] + q * se, "se": se})
    return {"coefficients": out, "n": n, "r2": 1 - sum(e * e for e in resid) / sst if sst > 0 else None}


def _invert(m):
    n = len(m)
    a = [row[:] + [1.0 if i == j else 0.0 for j in range(n)] for i, row in enumerate(m)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-12:
            return None
        a[col], a[piv] = a[piv], a[col]
        p = a[col][col]
        a[col] = [x / p for x in a[col]]
        for r in range(n):
            if r != col:
                f = a[r][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [row[n:] for row in a]


# ---- reading runs ----
def read_jsonl(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a kill: the run resumes and rewrites it
    return out


def cell_of(task):
    loops = (task.get("loop_rate") or 0) > 0
    levels = bool(task.get("verbose_levels")) or (task.get("verbose_rate") or 0) > 0
    return {(False, False): "C0", (False, True): "CV", (True, False): "LOOP", (True, True): "BOTH"}[
        (loops, levels)
    ]


def moving(xs, w):
    return [mean(xs[max(0, i - w + 1) : i + 1]) for i in range(len(xs))]


def get(m, key):
    v = m.get(key)
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def run_measures(d, phase):
    cfg = tomllib.loads((d / "config.toml").read_text())
    steps = read_jsonl(d / "metrics.jsonl")
    evals = [e for e in read_jsonl(d / "eval.jsonl") if e.get("phase") != "sft"]
    total = cfg.get("steps", 0)
    done = (d / "summary.json").exists()
    rule = cfg.get("rule")
    r = {
        "phase": phase,
        "dir": str(d),
        "cell": cell_of(cfg.get("task", {})),
        "rule": rule,
        "seed": cfg.get("seed"),
        "lr": cfg.get("optim", {}).get("lr"),
        "ba_pos_scale": cfg.get("ba_pos_scale", 1.0),
        "mini_batches": cfg.get("ppo", {}).get("mini_batches", 1),
        "steps": len(steps),
        "finished": done,
    }
    greedy = [(e["step"], e.get("greedy_accuracy")) for e in evals if e.get("greedy_accuracy") is not None]
    start = next((e for e in evals if e["step"] == 0), None)
    final = evals[-1] if evals and evals[-1]["step"] > 0 else None
    r["start_greedy"] = start.get("greedy_accuracy") if start else None
    r["start_avg"] = start.get("accuracy") if start else None
    r["final_greedy"] = final.get("greedy_accuracy") if final else None
    r["final_avg"] = final.get("accuracy") if final else None
    r["final_pass"] = final.get("pass_at_k") if final else None
    r["final_pass_gap"] = (
        final["pass_at_k"] - final["accuracy"] if final and final.get("pass_at_k") is not None else None
    )
    avg = [(e["step"], e.get("accuracy")) for e in evals if e.get("accuracy") is not None]
    r["greedy_auc"] = trapezoid_mean(greedy)
    r["avg_auc"] = trapezoid_mean(avg)
    r["best_avg"] = max((a for _, a in avg), default=None)

    early = [m for m in steps if EARLY[0] <= m["step"] <= EARLY[1]]
    for key, name in [
        ("mass_ratio/token", "early_m_token"),
        ("len/cv", "early_len_cv"),
        ("len/cv_side", "early_cv_side"),
        ("len/gap_rel", "early_gap_rel"),
        ("len/truncated_frac", "early_truncated"),
        ("update_cos/token", "early_cos_token"),
        ("update_cos/seq", "early_cos_seq"),
        ("update_cos/ba", "early_cos_ba"),
        ("update_cos/token-group", "early_cos_token_group"),
        ("trunc_share/token", "early_trunc_share_token"),
        ("trunc_share/seq", "early_trunc_share_seq"),
        ("trunc_share/ba", "early_trunc_share_ba"),
        ("trunc_share/token-group", "early_trunc_share_token_group"),
        ("clip/frac", "early_clip_frac"),
    ]:
        r[name] = mean([get(m, key) for m in early])
    r["trunc_share_own"] = mean([get(m, f"trunc_share/{rule}") for m in early])

    w = COLLAPSE["window"]
    ent = [get(m, "entropy/mean") for m in steps]
    # The correct responses' length: the mean over all falls by design when loops are suppressed.
    length = [get(m, "len/pos_mean") for m in steps]
    trunc = [get(m, "len/truncated_frac") for m in steps]
    grads = [get(m, "grad/norm") for m in steps]
    ent0, len0, trunc0 = mean(ent[:w]), mean(length[:w]), mean(trunc[:w])
    ent_m, len_m, trunc_m = moving(ent, w), moving(length, w), moving(trunc, w)
    # Events are read on full windows only: a partial window at the start is one or two noisy
    # steps, not a trend (the first step alone could otherwise be "1.5x its start").
    ent_f, len_f, trunc_f = ent_m[w - 1 :], len_m[w - 1 :], trunc_m[w - 1 :]
    r["entropy_ratio"] = mean(ent[-w:]) / ent0 if ent0 else None
    r["entropy_slope"] = _slope([(m["step"], e) for m, e in zip(steps, ent) if e is not None])
    r["len_pos_last"] = mean([get(m, "len/pos_mean") for m in steps[-10:]])
    r["len_neg_last"] = mean([get(m, "len/neg_mean") for m in steps[-10:]])
    r["truncated_start"] = trunc0
    r["truncated_last"] = mean(trunc[-w:])
    # Half-life: the first step at which the trailing mean of the truncated fraction is at most
    # half its start; None (censored) when it never is.
    r["trunc_half_life"] = None
    if trunc0 and trunc0 > 0:
        for m, t in zip(steps, trunc_m):
            if t is not None and t <= 0.5 * trunc0:
                r["trunc_half_life"] = m["step"]
                break
    med = sorted(g for g in grads if g is not None)
    med = med[len(med) // 2] if med else None
    events = {
        "entropy": any(e is not None and ent0 and e < COLLAPSE["entropy_floor"] * ent0 for e in ent_f),
        "length": any(
            l is not None and len0 and (l > COLLAPSE["len_high"] * len0 or l < COLLAPSE["len_low"] * len0)
            for l in len_f
        ),
        "truncation": any(
            t is not None and trunc0 is not None and t > max(COLLAPSE["trunc_abs"], COLLAPSE["trunc_rel"] * trunc0)
            for t in trunc_f
        ),
        "accuracy": (
            r["final_avg"] is not None
            and r["best_avg"] is not None
            and r["final_avg"] <= r["best_avg"] - COLLAPSE["acc_drop"]
        ),
        "update": any(m.get("skipped") for m in steps)
        or (med is not None and med > 0 and any(g is not None and g > COLLAPSE["grad_spike"] * med for g in grads)),
    }
    r["collapse_events"] = [k for k, v in events.items() if v]
    r["collapsed"] = bool(r["collapse_events"])
    return r


def trapezoid_mean(points):
    """Mean of a curve over its steps (the trapezoid area over the span), from step 0."""
    if len(points) < 2 or points[0][0] != 0:
        return None
    area = sum((s1 - s0) * (a0 + a1) / 2 for (s0, a0), (s1, a1) in zip(points, points[1:]))
    return area / (points[-1][0] - points[0][0])


def _slope(points):
    if len(points) < 3:
        return None
    fit = ols([([1.0, x], y) for x, y in points])
    return fit["coefficients"][1]["coef"] if fit else None


def load_runs(root):
    runs = []
    for phase_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for d in sorted(phase_dir.glob("runs/*/*-seed*")):
            if (d / "config.toml").exists():
                runs.append(run_measures(d, phase_dir.name))
    return runs


# ---- contrasts ----
def paired(runs, a, b, key, cell=None):
    by = {}
    for r in runs:
        if cell and r["cell"] != cell:
            continue
        by.setdefault((r["cell"], r["seed"]), {})[r["rule"]] = r.get(key)
    diffs = []
    for rules in by.values():
        if rules.get(a) is not None and rules.get(b) is not None:
            diffs.append(rules[a] - rules[b])
    return diffs


def t_test_p(xs):
    """Two-sided one-sample t-test p of mean 0."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if len(xs) < 2:
        return None
    s = sd(xs)
    if not s:
        return 0.0 if mean(xs) != 0 else 1.0
    t = mean(xs) / (s / math.sqrt(len(xs)))
    return 2 * (1 - t_cdf(abs(t), len(xs) - 1))


def contrast(runs, a, b, key, cell=None):
    d = paired(runs, a, b, key, cell)
    out = mean_ci(d) or {}
    out["p_t"] = t_test_p(d)
    out["p_perm"] = sign_flip_p(d)
    out["diffs"] = d
    return out


def pooled_contrast(runs, a, b, key):
    """The mixed model y ~ rule * cell + (1 | cell:seed), for one contrast: the random
    intercept of a cell and seed cancels in the within-seed difference (every rule starts from
    the cell's one warm-up), so the model is d = mu + alpha_cell + e. Reported: the mean of the
    cell means, with the pooled residual variance (df = pairs - cells)."""
    cells = {}
    for c in CELLS:
        d = paired(runs, a, b, key, c)
        if d:
            cells[c] = d
    if not cells:
        return None
    means = {c: mean(d) for c, d in cells.items()}
    resid = [x - means[c] for c, d in cells.items() for x in d]
    n, k = len(resid), len(cells)
    mu = mean(list(means.values()))
    if n - k < 1:
        return {"mean": mu, "n": n}
    s2 = sum(e * e for e in resid) / (n - k)
    se = math.sqrt(s2 * sum(1 / len(d) for d in cells.values())) / k
    t = mu / se if se > 0 else float("inf")
    p = 2 * (1 - t_cdf(abs(t), n - k)) if se > 0 else 0.0
    q = t_quantile(1 - ALPHA / 2, n - k)
    flat = [x for d in cells.values() for x in d]
    return {
        "mean": mu,
        "lo": mu - q * se,
        "hi": mu + q * se,
        "p_t": p,
        "p_perm_pooled": sign_flip_p(flat) if len(flat) <= 20 else None,
        "n": n,
        "cells": k,
    }


def verdict(test, predicted_sign):
    """supported: significant (Holm-adjusted t p < ALPHA) with the predicted sign; refuted:
    significant with the other sign; inert: not significant and the 95% interval lies inside
    +-EQUIV; undecided: none of these. (With n seeds the exact sign-flip p cannot go below
    2 / 2^n, 0.125 for 4 seeds, so it is reported beside the t test, not used to decide.)"""
    if not test or test.get("lo") is None:
        return "not run"
    p = test.get("p_holm", test.get("p_t"))
    if p is not None and p < ALPHA:
        return "supported" if (test["mean"] > 0) == (predicted_sign > 0) else "refuted"
    if -EQUIV < test["lo"] and test["hi"] < EQUIV:
        return "inert"
    return "undecided"


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/study2")
    if not root.is_dir():
        sys.exit(f"study2_analysis: {root} is not a directory (run scripts/study2.sh first)")
    runs = load_runs(root)
    main_runs = [r for r in runs if r["phase"] == "main" and r["finished"]]
    out = {"root": str(root), "runs": runs, "constants": {"alpha": ALPHA, "equivalence": EQUIV, "collapse": COLLAPSE}}

    # Manipulation checks, per cell (all finished main runs and the pilot's ba runs).
    manip = {}
    for c in CELLS:
        rs = [r for r in runs if r["cell"] == c and r["phase"] in ("main", "pilot")]
        manip[c] = {
            k: mean([r[k] for r in rs])
            for k in [
                "early_m_token",
                "early_len_cv",
                "early_cv_side",
                "early_gap_rel",
                "early_truncated",
                "early_cos_token",
                "early_cos_seq",
                "early_cos_token_group",
                "start_greedy",
            ]
        }
        manip[c]["runs"] = len(rs)
    out["manipulation"] = manip

    # Contrasts per cell and pooled, for both primary metrics.
    pairs = [("ba", "token"), ("ba", "seq"), ("ba", "token-group"), ("token", "seq")]
    out["contrasts"] = {}
    for key in [
        "final_avg",
        "avg_auc",
        "final_greedy",
        "final_pass_gap",
        "entropy_ratio",
        "entropy_slope",
        "truncated_last",
        "trunc_half_life",
    ]:
        out["contrasts"][key] = {
            f"{a}-{b}": {
                "cells": {c: contrast(main_runs, a, b, key, c) for c in CELLS},
                "pooled": pooled_contrast(main_runs, a, b, key),
            }
            for a, b in pairs
        }

    # The pre-registered primary tests and their Holm correction (final avg@4).
    primary = [
        ("A1 ba-token in BOTH", "ba", "token", "BOTH", +1),
        ("A1 ba-seq in BOTH", "ba", "seq", "BOTH", +1),
        ("B1 token-seq in LOOP", "token", "seq", "LOOP", -1),
        ("B1 token-seq in CV", "token", "seq", "CV", +1),
    ]
    tests = []
    for name, a, b, c, sign in primary:
        ci = contrast(main_runs, a, b, "final_avg", c)
        keys = ["mean", "lo", "hi", "n", "p_t", "p_perm"]
        tests.append({"test": name, "predicted_sign": sign, **{k: ci.get(k) for k in keys}})
    ps = [t["p_t"] if t["p_t"] is not None else 1.0 for t in tests]
    for t, adj in zip(tests, holm(ps)):
        t["p_holm"] = adj
        t["verdict"] = verdict(t, t["predicted_sign"])
    out["primary_tests"] = tests

    # A2 non-inferiority: ba >= best other - 1.5 points in every cell (lower CI bound).
    noninf = {}
    for c in CELLS:
        worst = None
        for other in ["token", "seq", "token-group"]:
            ci = contrast(main_runs, "ba", other, "final_avg", c)
            if ci.get("lo") is not None:
                worst = ci["lo"] if worst is None else min(worst, ci["lo"])
        noninf[c] = {"lowest_lo": worst, "non_inferior": None if worst is None else worst > -0.015}
    out["A2_non_inferiority"] = noninf

    # M2: loop suppression in LOOP and BOTH: predicted mass share on truncated tokens vs the
    # measured truncated half-life and the truncated fraction at the end.
    m2 = {}
    for c in ["LOOP", "BOTH"]:
        m2[c] = {}
        for rule in ["token", "seq", "ba", "token-group"]:
            rs = [r for r in main_runs if r["cell"] == c and r["rule"] == rule]
            m2[c][rule] = {
                "predicted_trunc_share": mean([r["trunc_share_own"] for r in rs]),
                "truncated_start": mean([r["truncated_start"] for r in rs]),
                "truncated_last": mean([r["truncated_last"] for r in rs]),
                "half_life": [r["trunc_half_life"] for r in rs],
                "len_neg_last": mean([r["len_neg_last"] for r in rs]),
                "runs": len(rs),
            }
    out["M2_loop_suppression"] = m2

    # M1: ba_pos_scale dose-response in C0.
    dose = [r for r in runs if r["phase"].startswith("dose-") and r["finished"]]
    by_scale = {}
    for r in dose:
        by_scale.setdefault(r["ba_pos_scale"], []).append(r)
    m1 = []
    for scale in sorted(by_scale):
        rs = by_scale[scale]
        m1.append(
            {
                "ba_pos_scale": scale,
                "runs": len(rs),
                "entropy_slope": mean([r["entropy_slope"] for r in rs]),
                "entropy_ratio": mean([r["entropy_ratio"] for r in rs]),
                "pass_gap": mean([r["final_pass_gap"] for r in rs]),
                "avg_auc": mean([r["avg_auc"] for r in rs]),
                "final_avg": mean([r["final_avg"] for r in rs]),
                "collapses": sum(r["collapsed"] for r in rs),
            }
        )
    if len(m1) >= 3:
        pts = [(math.log(x["ba_pos_scale"]), x) for x in m1]
        out["M1_trend"] = {
            k: ols([([1.0, lx], x[k]) for lx, x in pts if x[k] is not None])
            for k in ["entropy_slope", "pass_gap", "avg_auc"]
        }
    out["M1_dose"] = m1

    # Stress regime: collapse counts per rule.
    stress = [r for r in runs if r["phase"] == "stress" and r["finished"]]
    out["stress"] = {
        rule: {
            "runs": len([r for r in stress if r["rule"] == rule]),
            "collapsed": sum(r["collapsed"] for r in stress if r["rule"] == rule),
            "events": [r["collapse_events"] for r in stress if r["rule"] == rule],
            "final_avg": mean([r["final_avg"] for r in stress if r["rule"] == rule]),
        }
        for rule in ["token", "seq", "ba"]
    }

    # B2: token - seq against the length CV and |gap|, pooled with the first study (a study
    # fixed effect). Points: one per cell (here) or setting (there), the mean over seeds.
    pts = []
    for c in CELLS:
        d = paired(main_runs, "token", "seq", "final_avg", c)
        if d and manip[c]["early_len_cv"] is not None:
            pts.append((0.0, manip[c]["early_len_cv"], abs(manip[c]["early_gap_rel"] or 0.0), mean(d)))
    first = Path(__file__).resolve().parent.parent / "docs/study/first-study-points.json"
    if first.exists():
        for p in json.loads(first.read_text())["settings"]:
            pts.append((1.0, p["len_cv"], abs(p["gap_rel"]), p["token_minus_seq"]))
    out["B2_points"] = [{"first_study": s, "len_cv": cv, "abs_gap_rel": g, "token_minus_seq": y} for s, cv, g, y in pts]
    out["B2_regression"] = ols([([1.0, s, cv, g], y) for s, cv, g, y in pts]) if len(pts) > 4 else None
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()

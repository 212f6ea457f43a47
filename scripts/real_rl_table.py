#!/usr/bin/env python3
"""The real-model RL table of docs/results.md from run directories and their held-out samples.

    python3 scripts/real_rl_table.py runs/real-rl/ba-seed0 runs/real-rl/token-seed0 ...

For each run: the held-out accuracy at the start, at every evaluation and at the end
(eval.jsonl), the training reward and response length over the first and last five steps, the
median seconds per step, and the paired change from start to end per held-out problem, read
from docs/real-rl/<rule>-seed<S>-{start,end}.samples.jsonl[.gz] (as `fulcrum eval --samples`
writes them): mean difference, its 95% interval (normal approximation of the paired mean; with
300 problems the t and normal quantiles differ in the third digit) and McNemar's exact p.
Peak RSS, when given as RUN=KB in --rss, is printed as it was measured.
"""
import argparse
import gzip
import json
import math
import os
import statistics
import sys


def read_jsonl(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def samples(name):
    for ext in (".samples.jsonl", ".samples.jsonl.gz"):
        path = os.path.join("docs", "real-rl", name + ext)
        if os.path.exists(path):
            return {r["id"]: float(r["correct"]) for r in read_jsonl(path)}
    return None


def binom_two_sided(k, n):
    """McNemar's exact p: two-sided binomial test of k successes in n at 1/2."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(start, end):
    ids = sorted(set(start) & set(end))
    if len(ids) != len(start) or len(ids) != len(end):
        sys.exit(f"start and end samples cover different problems ({len(start)}, {len(end)}, {len(ids)} shared)")
    d = [end[i] - start[i] for i in ids]
    n = len(d)
    mean = sum(d) / n
    sd = statistics.stdev(d) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    gained = sum(1 for x in d if x > 0)
    lost = sum(1 for x in d if x < 0)
    return {"n": n, "start": sum(start[i] for i in ids) / n, "end": sum(end[i] for i in ids) / n,
            "diff": mean, "lo": mean - half, "hi": mean + half, "gained": gained, "lost": lost,
            "p_mcnemar": binom_two_sided(min(gained, lost), gained + lost)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--rss", nargs="*", default=[], help="RUN_DIR=KB of peak resident memory")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rss = dict(x.split("=", 1) for x in a.rss)
    rows = []
    for run in a.runs:
        cfg = open(os.path.join(run, "config.toml")).read()
        rule = next(l.split("=")[1].strip().strip('"') for l in cfg.splitlines() if l.startswith("rule ="))
        seed = next(l.split("=")[1].strip() for l in cfg.splitlines() if l.startswith("seed ="))
        evals = read_jsonl(os.path.join(run, "eval.jsonl"))
        metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
        first, last = metrics[:5], metrics[-5:]
        mean = lambda ms, k: sum(m[k] for m in ms) / len(ms)
        name = f"{rule}-seed{seed}"
        s, e = samples(name + "-start"), samples(name + "-end")
        rows.append({
            "run": run, "rule": rule, "seed": int(seed), "steps": metrics[-1]["step"],
            "evals": [(x["step"], x["accuracy"]) for x in evals],
            "reward_first5": mean(first, "reward/mean"), "reward_last5": mean(last, "reward/mean"),
            "len_first5": mean(first, "len/mean"), "len_last5": mean(last, "len/mean"),
            "s_per_step": statistics.median(m["time/step"] for m in metrics),
            "peak_rss_gb": int(rss[run]) / 1e6 if run in rss else None,
            "paired": paired(s, e) if s and e else None,
        })
    # Rules against each other: the end samples of two runs with the same seed, paired per problem.
    ends = {}
    for r in rows:
        e = samples(f"{r['rule']}-seed{r['seed']}-end")
        if e:
            ends[(r["rule"], r["seed"])] = e
    versus = []
    for (rule, seed), e in sorted(ends.items()):
        for (other, seed2), e2 in sorted(ends.items()):
            if seed2 == seed and rule == "ba" and other != "ba":
                versus.append({"a": rule, "b": other, "seed": seed, **paired(e2, e)})
    if a.json:
        print(json.dumps({"runs": rows, "versus": versus}, indent=1))
        return
    print("| run | held-out greedy accuracy by step | end - start (95% CI), gained/lost, McNemar p | reward first/last 5 steps | length first/last 5 | s/step (median) | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ev = ", ".join(f"{st}: {acc:.3f}" for st, acc in r["evals"])
        p = r["paired"]
        pc = (f"**{p['diff']:+.3f}** ({p['lo']:+.3f}, {p['hi']:+.3f}), {p['gained']}/{p['lost']}, p = {p['p_mcnemar']:.1e}"
              if p else "no samples files")
        rss_s = f"{r['peak_rss_gb']:.1f} GB" if r["peak_rss_gb"] else "-"
        print(f"| `{r['rule']}` seed {r['seed']} | {ev} | {pc} | {r['reward_first5']:.2f} / {r['reward_last5']:.2f} "
              f"| {r['len_first5']:.1f} / {r['len_last5']:.1f} | {r['s_per_step']:.0f} | {rss_s} |")
    if versus:
        print()
        print("| end accuracy, same seed | difference (95% CI) | problems only the first / only the second solves | McNemar p |")
        print("|---|---|---|---|")
        for v in versus:
            print(f"| `{v['a']}` {v['end']:.3f} - `{v['b']}` {v['start']:.3f}, seed {v['seed']} | {v['diff']:+.3f} "
                  f"({v['lo']:+.3f}, {v['hi']:+.3f}) | {v['gained']} / {v['lost']} | {v['p_mcnemar']:.2g} |")


if __name__ == "__main__":
    main()

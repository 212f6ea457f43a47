#!/usr/bin/env python3
"""Markdown table of the real-model evaluation written by scripts/eval-real.sh.

    scripts/eval-real-table.py [DIR]      # DIR: runs/eval-real unless given

One row per model and benchmark JSON file (`MODEL-BENCH.json`, the output of
`fulcrum eval --json`), in the benchmark order of the script, then a total per model. The
problems column says how many of the benchmark's problems were evaluated ("164 of 164", or
"30 of 500" for a subset: the first 30 of the fixed seeded order); files of builds before
`problems_total` was written get the registry's size. A wall time marked "+" is that of the
last run only: some problems came from the samples file of an earlier one.
"""
import json
import math
import pathlib
import sys

ORDER = ["gsm8k", "math500", "minerva", "olympiadbench", "amc23", "aime24", "aime25",
         "humaneval", "mbpp"]
# The registry's sizes, for JSON files written before `problems_total` existed.
TOTALS = {"gsm8k": 1319, "math500": 500, "minerva": 272, "olympiadbench": 675, "amc23": 40,
          "aime24": 30, "aime25": 30, "humaneval": 164, "mbpp": 427}
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct (Q4_1)",
    "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct",
}


def wilson(ok: float, n: int, z: float = 1.96) -> str:
    """The 95% Wilson score interval of a proportion, in percent."""
    if n == 0:
        return "-"
    p = ok / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * max(0.0, centre - half):.0f}-{100 * min(1.0, centre + half):.0f}%"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/eval-real")
    print("| model | bench | problems | responses | correct | accuracy (95% CI) "
          "| mean response (tokens) | limit | cut at the limit | wall (s) | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key, name in MODELS.items():
        total = {"n": 0, "ok": 0.0, "tokens": 0.0, "secs": 0.0, "cut": 0.0, "resumed": False,
                 "fresh_tokens": 0.0, "fresh_secs": 0.0}
        for bench in ORDER:
            path = root / f"{key}-{bench}.json"
            if not path.is_file():
                continue
            try:
                doc = json.loads(path.read_text())
                row = doc["results"][0]
                r = row["result"]
                problems = r.get("problems", r["prompts"])
                per = r.get("samples_per_problem", r["k"])
                n, acc, mean_len = problems * per, r.get("avg@k", r["accuracy"]), r["mean_len"]
                secs, tps = row["seconds"], r["tokens_per_s"]
                cut = r.get("truncated")  # absent in files of older builds
                of = r.get("problems_total", TOTALS.get(bench))
                limit = r.get("max_new_tokens")
                cached = r.get("problems_cached", 0)
                resumed = cached > 0
            except (ValueError, KeyError, IndexError, TypeError) as e:
                print(f"eval-real-table: {path}: unreadable ({e})", file=sys.stderr)
                return 2
            ok = round(acc * n)
            total["n"] += n
            total["ok"] += ok
            total["tokens"] += mean_len * n
            total["secs"] += secs
            total["resumed"] |= resumed
            if not resumed:
                # Only a run that sampled every problem itself has a whole-set rate.
                total["fresh_tokens"] += mean_len * n
                total["fresh_secs"] += secs
            total["cut"] = None if cut is None or total["cut"] is None else total["cut"] + cut * n
            cut_text = "?" if cut is None else f"{100 * cut:.0f}%"
            of_text = f"{problems} of {of}" if of is not None else f"{problems}"
            limit_text = "?" if limit is None else f"{limit}"
            # All problems read from the samples file: this run sampled nothing, so neither its
            # wall time nor its rate describe the evaluation.
            all_cached = cached >= problems
            wall = "-" if all_cached else f"{secs:.0f}{'+' if resumed else ''}"
            tps_text = "-" if all_cached else f"{tps:.1f}"
            print(f"| {name} | {bench} | {of_text} | {n} | {ok} | {100 * acc:.1f}% ({wilson(ok, n)}) "
                  f"| {mean_len:.0f} | {limit_text} | {cut_text} | {wall} | {tps_text} |")
        if total["n"]:
            n = total["n"]
            cut_text = "?" if total["cut"] is None else f"{100 * total['cut'] / n:.0f}%"
            wall = f"{total['secs']:.0f}{'+' if total['resumed'] else ''}"
            rate = (f"{total['fresh_tokens'] / total['fresh_secs']:.1f}" if total["fresh_secs"] > 0
                    else "-")
            print(f"| {name} | **all** | | {n} | {total['ok']:.0f} "
                  f"| {100 * total['ok'] / n:.1f}% ({wilson(total['ok'], n)}) | {total['tokens'] / n:.0f} "
                  f"| | {cut_text} "
                  f"| {wall} | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

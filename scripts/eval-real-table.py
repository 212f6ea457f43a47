#!/usr/bin/env python3
"""Markdown table of the real-model evaluation written by scripts/eval-real.sh.

    scripts/eval-real-table.py [DIR]      # DIR: runs/eval-real unless given

One row per model and benchmark JSON file (`MODEL-BENCH.json`, the output of
`fulcrum eval --json`), in the benchmark order of the script, then a total per model.
"""
import json
import math
import pathlib
import sys

ORDER = ["gsm8k", "math500", "minerva", "olympiadbench", "amc23", "aime24", "aime25",
         "humaneval", "mbpp"]
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
    print("| model | bench | problems | correct | accuracy (95% CI) | mean response (tokens) "
          "| cut at the limit | wall (s) | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, name in MODELS.items():
        total = {"n": 0, "ok": 0.0, "tokens": 0.0, "secs": 0.0, "cut": 0.0}
        for bench in ORDER:
            path = root / f"{key}-{bench}.json"
            if not path.is_file():
                continue
            try:
                doc = json.loads(path.read_text())
                row = doc["results"][0]
                r = row["result"]
                n, acc, mean_len = r["prompts"] * r["k"], r["accuracy"], r["mean_len"]
                secs, tps = row["seconds"], r["tokens_per_s"]
                cut = r.get("truncated")  # absent in files of older builds
            except (ValueError, KeyError, IndexError, TypeError) as e:
                print(f"eval-real-table: {path}: unreadable ({e})", file=sys.stderr)
                return 2
            ok = round(acc * n)
            total["n"] += n
            total["ok"] += ok
            total["tokens"] += mean_len * n
            total["secs"] += secs
            total["cut"] = None if cut is None or total["cut"] is None else total["cut"] + cut * n
            cut_text = "?" if cut is None else f"{100 * cut:.0f}%"
            print(f"| {name} | {bench} | {n} | {ok} | {100 * acc:.1f}% ({wilson(ok, n)}) | {mean_len:.0f} "
                  f"| {cut_text} | {secs:.0f} | {tps:.1f} |")
        if total["n"]:
            n = total["n"]
            cut_text = "?" if total["cut"] is None else f"{100 * total['cut'] / n:.0f}%"
            print(f"| {name} | **all** | {n} | {total['ok']:.0f} "
                  f"| {100 * total['ok'] / n:.1f}% ({wilson(total['ok'], n)}) | {total['tokens'] / n:.0f} "
                  f"| {cut_text} "
                  f"| {total['secs']:.0f} | {total['tokens'] / max(total['secs'], 1e-9):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

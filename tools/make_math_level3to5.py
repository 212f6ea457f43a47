#!/usr/bin/env python3
"""Writes data/math_train/math_level3to5.jsonl: the MATH train problems of levels 3 to 5 with a
non-empty answer, from ../shared/data/math_train/math_train.json (see data/SOURCES.md), one
{"problem", "answer", "level", "type"} object per line, in file order. The training prompts of
configs/smollm2-gsm8k.toml."""
import json
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "..", "shared", "data", "math_train", "math_train.json")
dst = os.path.join(root, "data", "math_train", "math_level3to5.jsonl")
records = json.load(open(src))
kept = [r for r in records if r.get("answer") not in (None, "") and r["difficulty"] >= 3]
os.makedirs(os.path.dirname(dst), exist_ok=True)
with open(dst + ".tmp", "w") as out:
    for r in kept:
        out.write(json.dumps({"problem": r["problem"], "answer": r["answer"], "level": int(r["difficulty"]), "type": r["type"]}) + "\n")
os.replace(dst + ".tmp", dst)
print(f"{dst}: {len(kept)} of {len(records)} records (levels 3-5, answer present)")

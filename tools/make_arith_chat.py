#!/usr/bin/env python3
"""Writes the chat-arithmetic task of configs/real-rl-cpu.toml (data/SOURCES.md, "arith/chat_*").

Two families a 135M instruct model partly solves: two-digit additions (a + b, a and b in 10..99)
and one-digit by two-digit products (a * b, a in 2..9, b in 10..99). The held-out set is 150 of
each, drawn with a fixed seed; the training set is every remaining product (570) and as many of
the remaining additions, shuffled. No (operation, a, b) is in both files.

    python3 tools/make_arith_chat.py        # rewrites data/arith/chat_train.jsonl, chat_heldout.jsonl

The same problems in a reasoning format (the real-model study's setting B, docs/study-real/): the
prompt asks for the working first and the answer on the last line, so a response's length varies
with how the model reasons, and wrong answers can run long:

    python3 tools/make_arith_chat.py --reasoning   # data/arith/chat_reason_train.jsonl, ..._heldout.jsonl
"""
import json
import random
import sys
from pathlib import Path

SEED = 20261205
PER_FAMILY_HELDOUT = 150


def record(op, a, b, reasoning=False):
    value = a + b if op == "+" else a * b
    name = "add" if op == "+" else "mul"
    ask = (
        "Work it out step by step, then give the final answer on the last line as \"Answer: N\"."
        if reasoning
        else "Answer with just the number."
    )
    return {
        "id": f"{name}-{a}-{b}",
        "prompt": f"What is {a} {op} {b}? {ask}",
        "answer": str(value),
        "verifier": "math",
    }


def main():
    reasoning = "--reasoning" in sys.argv[1:]
    rng = random.Random(SEED)
    adds = [("+", a, b) for a in range(10, 100) for b in range(10, 100)]
    muls = [("*", a, b) for a in range(2, 10) for b in range(10, 100)]
    rng.shuffle(adds)
    rng.shuffle(muls)
    heldout = adds[:PER_FAMILY_HELDOUT] + muls[:PER_FAMILY_HELDOUT]
    rest_muls = muls[PER_FAMILY_HELDOUT:]
    train = rest_muls + adds[PER_FAMILY_HELDOUT:PER_FAMILY_HELDOUT + len(rest_muls)]
    rng.shuffle(heldout)
    rng.shuffle(train)
    assert not set(heldout) & set(train)
    out = Path(__file__).resolve().parent.parent / "data" / "arith"
    stem = "chat_reason" if reasoning else "chat"
    for name, rows in ((f"{stem}_train.jsonl", train), (f"{stem}_heldout.jsonl", heldout)):
        with open(out / name, "w") as f:
            for r in rows:
                f.write(json.dumps(record(*r, reasoning=reasoning)) + "\n")
        print(f"{name}: {len(rows)} records")


if __name__ == "__main__":
    main()

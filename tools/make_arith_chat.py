#!/usr/bin/env python3
"""Writes the chat-arithmetic task of configs/real-rl-cpu.toml (data/SOURCES.md, "arith/chat_*").

Two families a 135M instruct model partly solves: two-digit additions (a + b, a and b in 10..99)
and one-digit by two-digit products (a * b, a in 2..9, b in 10..99). The held-out set is 150 of
each, drawn with a fixed seed; the training set is every remaining product (570) and as many of
the remaining additions, shuffled. No (operation, a, b) is in both files.

    python3 tools/make_arith_chat.py        # rewrites data/arith/chat_train.jsonl, chat_heldout.jsonl
"""
import json
import random
from pathlib import Path

SEED = 20261205
PER_FAMILY_HELDOUT = 150


def record(op, a, b):
    value = a + b if op == "+" else a * b
    name = "add" if op == "+" else "mul"
    return {
        "id": f"{name}-{a}-{b}",
        "prompt": f"What is {a} {op} {b}? Answer with just the number.",
        "answer": str(value),
        "verifier": "math",
    }


def main():
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
    for name, rows in (("chat_train.jsonl", train), ("chat_heldout.jsonl", heldout)):
        with open(out / name, "w") as f:
            for r in rows:
                f.write(json.dumps(record(*r)) + "\n")
        print(f"{name}: {len(rows)} records")


if __name__ == "__main__":
    main()

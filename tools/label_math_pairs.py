"""Build and label the math-checker agreement fixture with HF Math-Verify.

Reads the gold answers of the evaluation sets in ../shared/data/math_eval (or --data DIR), writes
for each chosen gold: the real answer, an equivalent rewriting and a near-miss wrong answer, each
wrapped in a model-style response, then labels every (gold, response) pair with Math-Verify:
`verify(parse("\\boxed{gold}"), parse(response))`.

Run offline in a throwaway venv (`python3 -m venv /tmp/mv && /tmp/mv/bin/pip install math-verify`):
    /tmp/mv/bin/python tools/label_math_pairs.py --out crates/fulcrum-tasks/tests/fixtures/math_pairs.jsonl

The output is deterministic for a given seed and Math-Verify version (recorded in each line).
"""
import argparse
import importlib.metadata
import json
import random
import re
from pathlib import Path

from math_verify import parse, verify


def strip_dollars(s):
    s = s.strip()
    if s.startswith("$") and s.endswith("$") and len(s) >= 2:
        s = s.strip("$").strip()
    return s


def golds(data):
    out = []
    for line in open(data / "math500.jsonl"):
        out.append(("math500", json.loads(line)["answer"]))
    for line in open(data / "aime24.jsonl"):
        out.append(("aime24", str(json.loads(line)["answer"])))
    for line in open(data / "amc23.jsonl"):
        a = json.loads(line)["answer"]
        out.append(("amc23", str(int(a)) if float(a).is_integer() else str(a)))
    for r in json.load(open(data / "minerva_math_with_answer.json")):
        out.append(("minerva", r["answer"][0].strip()))
    for line in open(data / "olympiadbench.jsonl"):
        r = json.loads(line)
        if not r["is_multiple_answer"] and len(r["final_answer"]) == 1:
            out.append(("olympiadbench", strip_dollars(r["final_answer"][0])))
    for line in open(data / "gsm8k_test.jsonl"):
        a = json.loads(line)["answer"].split("####")[-1].strip()
        out.append(("gsm8k", a))
    return out


INT = re.compile(r"^-?\d+$")
FRAC = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
DEC = re.compile(r"^-?\d+\.\d+$")


def equivalent_rewrites(g, rng):
    c = []
    if INT.match(g):
        n = int(g)
        c += [f"{n}.0", f"\\frac{{{2 * n}}}{{2}}", f"{n}.00", f"x = {n}", f"{n}\\%"]
        if abs(n) >= 1000:
            c.append(f"{n:,}")
            if n % 100 == 0:
                c.append(f"{n / 1000:g}\\times 10^{{3}}")
    m = FRAC.match(g)
    if m:
        sgn, a, b = m.groups()
        c += [f"{sgn}{a}/{b}", f"{sgn}\\dfrac{{{a}}}{{{b}}}", f"{sgn}\\frac{{{2*int(a)}}}{{{2*int(b)}}}"]
        if int(a) > int(b) and int(a) % int(b):
            c.append(f"{sgn}{int(a) // int(b)}\\frac{{{int(a) % int(b)}}}{{{b}}}")
        x = int(a) / int(b)
        if int(b) in (2, 4, 5, 8, 10, 20, 25, 50, 100):
            c.append(("-" if sgn else "") + repr(round(x, 6)))
    if DEC.match(g):
        c += [g + "0", f"x={g}"]
    if "\\frac" in g and not FRAC.match(g):
        c.append(g.replace("\\frac", "\\dfrac"))
    if " " in g:
        c.append(g.replace(" ", ""))
    elif re.search(r"[+\-=,]", g[1:]):
        c.append(re.sub(r"\s+", " ", re.sub(r"(?<=.)([+\-=,])", r" \1 ", g)).strip())
    if "," in g and not g.startswith(("(", "[", "\\")) and not re.match(r"^-?\d{1,3}(,\d{3})+$", g):
        c.append(",".join(reversed(g.split(","))))
    if g.startswith("(") and g.endswith(")") and "," in g:
        c.append("\\left" + g[:-1] + "\\right)")
    if "^\\circ" in g:
        c.append(g.replace("^\\circ", ""))
    if not c:
        c.append("{" + g + "}")
    return rng.choice(c)


def wrong_rewrite(g, rng):
    if INT.match(g):
        n = int(g)
        return rng.choice([str(n + 1), str(n - 1), str(n * 10), str(-n) if n else "1"])
    m = FRAC.match(g)
    if m:
        sgn, a, b = m.groups()
        if a != b:
            return f"{sgn}\\frac{{{b}}}{{{a}}}"
        return f"{sgn}\\frac{{{a}}}{{{int(b) + 1}}}"
    digits = [i for i, ch in enumerate(g) if ch.isdigit()]
    if digits:
        i = rng.choice(digits)
        d = str((int(g[i]) + rng.randint(1, 8)) % 10)
        return g[:i] + d + g[i + 1 :]
    if g.startswith("(") and "," in g:
        parts = g[1:-1].split(",")
        if len(parts) == 2 and parts[0].strip() != parts[1].strip():
            return "(" + parts[1] + "," + parts[0] + g[-1]
    return g + "+1"


TEMPLATES = [
    "The answer is $\\boxed{{{x}}}$.",
    "So we get the result.\n\nTherefore, the final answer is $\\boxed{{{x}}}$. I hope it is correct.",
    "Putting it together, we find \\boxed{{{x}}}",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/math_eval")
    ap.add_argument("--out", required=True)
    ap.add_argument("--golds", type=int, default=560)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    all_golds = golds(Path(args.data))
    seen = set()
    uniq = []
    for src, g in all_golds:
        if g and g not in seen and len(g) < 80:
            seen.add(g)
            uniq.append((src, g))
    rng.shuffle(uniq)
    chosen = uniq[: args.golds]
    version = importlib.metadata.version("math-verify")
    n = 0
    with open(args.out, "w") as f:
        for src, g in chosen:
            gold_parsed = parse("\\boxed{" + g + "}")
            for kind, pred in (("same", g), ("rewrite", equivalent_rewrites(g, rng)), ("wrong", wrong_rewrite(g, rng))):
                response = rng.choice(TEMPLATES).format(x=pred)
                try:
                    label = bool(verify(gold_parsed, parse(response)))
                except Exception:  # noqa: BLE001 - Math-Verify failure is a "not equivalent" label
                    label = False
                f.write(json.dumps({"source": src, "kind": kind, "gold": g, "response": response,
                                    "math_verify": label, "math_verify_version": version}) + "\n")
                n += 1
    print(f"wrote {n} labelled pairs to {args.out}")


if __name__ == "__main__":
    main()

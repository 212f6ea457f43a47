#!/usr/bin/env python3
"""The program x mode table of docs/code-sandbox.md, from the JSON lines that the hostile
suites append to FULCRUM_SANDBOX_REPORT (scripts/test-sandbox.sh --table FILE runs them)."""
import json
import re
import sys


def short(row):
    """A few words on how the program ended: what stopped it, or what escaped."""
    if not row["contained"]:
        what = row["effect"] or "the attack worked (its test passed)"
        what = re.sub(r"/tmp/fulcrum-host-[^/]*-\d+", "HOSTDIR", what)
        what = re.sub(r"/tmp/fulcrum-sandbox-home-[^/]*", "$HOME", what)
        return "**ESCAPED**: " + re.sub(r"-\d{3,}\b", "-PID", what)
    reason = row["reason"]
    for pattern, word in [
        (r"code rewards refused", "refused"),
        (r"Errno 13\]|Permission denied", "EACCES"),
        (r"Errno 1\]|Operation not permitted", "EPERM"),
        (r"Errno 2\]|No such file", "ENOENT"),
        (r"Errno 18\]|cross-device", "EXDEV"),
        (r"Errno 30\]|Read-only file system", "EROFS"),
        (r"Errno 101\]|Network is unreachable", "ENETUNREACH"),
        (r"Errno 24\]|Too many open files", "EMFILE"),
        (r"Errno 27\]|File too large", "EFBIG"),
        (r"Errno 11\]|temporarily unavailable", "EAGAIN"),
        (r"Errno 28\]|No space left", "ENOSPC"),
        (r"gaierror|Name or service|name resolution", "no DNS"),
        (r"MemoryError", "MemoryError"),
        (r"not allowed to raise", "hard limit"),
        (r"SIGXCPU|CPU time", "CPU limit"),
        (r"output limit", "output cap"),
        (r"^timeout$", "timeout"),
        (r"did not run to the end", "no sentinel"),
        (r"NameError: name 'solution'", "nothing left"),
        (r"AssertionError", "no effect"),
    ]:
        if re.search(pattern, reason):
            return word
    return reason[:30]


def main(path):
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    columns, programs, cells = [], [], {}
    for r in rows:
        col = r["suite"]
        if r["suite"] in ("bwrap-absent", "bwrap-broken"):
            col = f"{r['suite']} → {r['mode']}"
        if not r["root"]:
            col += " (uid 65534)"
        if col not in columns:
            columns.append(col)
        if r["program"] not in programs:
            programs.append(r["program"])
        cells[(r["program"], col)] = short(r)
    print("| program | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for p in programs:
        print(f"| {p} | " + " | ".join(cells.get((p, c), "skipped") for c in columns) + " |")
    escaped = sum(1 for r in rows if not r["contained"])
    print()
    print(f"{len(rows)} runs, {escaped} escapes"
          + (" (all in unsafe-rlimit)" if all(r["mode"] == "unsafe-rlimit" for r in rows if not r["contained"]) else ""))


if __name__ == "__main__":
    main(sys.argv[1])

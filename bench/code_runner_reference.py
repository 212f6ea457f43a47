"""Reference for the code-runner benchmark: HumanEval canonical solutions run with a plain
Python subprocess per program (no sandbox, no limits but a timeout), with the same number of
concurrent workers. Prints one JSON line like the fulcrum example does.

    python3 bench/code_runner_reference.py data/code/HumanEval.jsonl.gz [WORKERS] [ROUNDS]
"""
import gzip
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def run(program):
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/main.py"
        with open(path, "w") as f:
            f.write(program)
        try:
            p = subprocess.run(["/usr/bin/python3", "-I", "-B", path], cwd=d, capture_output=True, timeout=10)
            return p.returncode == 0
        except subprocess.TimeoutExpired:
            return False


def main():
    path = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    problems = [json.loads(l) for l in gzip.open(path, "rt")]
    programs = [
        p["prompt"] + p["canonical_solution"] + "\n\n" + p["test"] + f"\n\ncheck({p['entry_point']})\n"
        for _ in range(rounds)
        for p in problems
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(run, programs))
    secs = time.perf_counter() - start
    print(json.dumps({"runner": "python-subprocess", "workers": workers, "programs": len(programs),
                      "passed": sum(results), "seconds": round(secs, 3),
                      "programs_per_second": round(len(programs) / secs, 2)}))


if __name__ == "__main__":
    main()

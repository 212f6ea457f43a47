#!/usr/bin/env python3
"""Tests of the real-model study's analysis (scripts/study_real_analysis.py): the pre-registered
stability events and decision rules on constructed cases (each verdict and claim reachable, each
boundary on its side), the whole analysis on constructed run directories, and, once the study's
runs are committed (docs/study-real/runs.tar.gz and analysis.json), that those files give the
committed analysis.json and report.md exactly.

Run: python3 -m unittest discover -s scripts -p 'test_*.py'   (standard library only)
"""

import gzip
import json
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import study_real_analysis as an  # noqa: E402

ROOT = HERE.parent
DOCS = ROOT / "docs" / "study-real"


def steps(n=40, **over):
    """A quiet run's metrics: constant entropy, length and gradient norm, nothing truncated."""
    rows = []
    for s in range(1, n + 1):
        m = {"step": s, "entropy/mean": 1.0, "len/mean": 20.0, "len/truncated_frac": 0.0,
             "grad/norm": 1.0, "skipped": False, "mass_ratio/token": 0.8, "reward/mean": 0.2}
        for k, f in over.items():
            m[k.replace("__", "/")] = f(s, m[k.replace("__", "/")])
        rows.append(m)
    return rows


def evals(curve):
    return [{"step": s, "accuracy": a} for s, a in curve.items()]


class Events(unittest.TestCase):
    def test_a_quiet_run_has_none(self):
        e = an.events(steps(), evals({0: 0.2, 10: 0.4, 20: 0.45, 30: 0.5, 40: 0.5}))
        self.assertEqual(e, {k: False for k in ("E1", "E2", "E3", "E4", "E5")})

    def test_collapse_is_a_drop_of_ten_points_from_the_best(self):
        e = an.events(steps(), evals({0: 0.2, 10: 0.5, 20: 0.45, 30: 0.45, 40: 0.40}))
        self.assertTrue(e["E1"])
        e = an.events(steps(), evals({0: 0.2, 10: 0.5, 20: 0.45, 30: 0.45, 40: 0.41}))
        self.assertFalse(e["E1"])

    def test_entropy_length_truncation_and_gradient_events(self):
        low = an.events(steps(entropy__mean=lambda s, v: 0.29 if s == 30 else v), evals({40: 0.5}))
        self.assertTrue(low["E2"])
        self.assertFalse(an.events(steps(entropy__mean=lambda s, v: 0.31 if s == 30 else v), evals({40: 0.5}))["E2"])
        # Length doubling counts only after step 5.
        self.assertFalse(an.events(steps(len__mean=lambda s, v: 50.0 if s <= 5 else v), evals({40: 0.5}))["E3"])
        self.assertTrue(an.events(steps(len__mean=lambda s, v: 41.0 if s == 6 else v), evals({40: 0.5}))["E3"])
        self.assertTrue(an.events(steps(len__truncated_frac=lambda s, v: 0.31 if s == 9 else v), evals({40: 0.5}))["E4"])
        self.assertFalse(an.events(steps(len__truncated_frac=lambda s, v: 0.30 if s == 9 else v), evals({40: 0.5}))["E4"])
        self.assertTrue(an.events(steps(grad__norm=lambda s, v: 5.1 if s == 20 else v), evals({40: 0.5}))["E5"])
        self.assertTrue(an.events(steps(skipped=lambda s, v: s == 3), evals({40: 0.5}))["E5"])


class Decisions(unittest.TestCase):
    def test_verdicts(self):
        self.assertEqual(an.verdict({"lo": 0.01, "hi": 0.05, "p_holm": 0.01}), "better")
        self.assertEqual(an.verdict({"lo": -0.05, "hi": -0.01, "p_holm": 0.01}), "worse")
        self.assertEqual(an.verdict({"lo": -0.02, "hi": 0.02, "p_holm": 0.9}), "inert")
        self.assertEqual(an.verdict({"lo": -0.03, "hi": 0.02, "p_holm": 0.9}), "undecided")
        # Significant but with the interval touching 0 cannot happen with a t interval; an
        # interval above 0 without the Holm-adjusted p is not "better".
        self.assertEqual(an.verdict({"lo": 0.01, "hi": 0.05, "p_holm": 0.06}), "undecided")
        self.assertEqual(an.verdict({"lo": None, "hi": None, "p_holm": None}), "undecided")

    def test_claims(self):
        self.assertEqual(an.claim({"a": "better", "b": "better", "c": "better"}), "supported")
        self.assertEqual(an.claim({"a": "better", "b": "inert", "c": "undecided"}), "partly supported")
        self.assertEqual(an.claim({"a": "better", "b": "worse", "c": "better"}), "refuted")
        self.assertEqual(an.claim({"a": "inert", "b": "inert", "c": "inert"}), "inert")
        self.assertEqual(an.claim({"a": "inert", "b": "undecided", "c": "inert"}), "undecided")


def write_run(root, rule, seed, final, problems):
    d = root / "runs" / "task" / f"{rule}-seed{seed}"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in steps()))
    curve = {0: 0.2, 10: final - 0.1, 20: final - 0.05, 30: final, 40: final}
    (d / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals(curve)))
    (d / "summary.json").write_text("{}")
    return problems


class WholeAnalysis(unittest.TestCase):
    def test_a_constructed_study_gives_its_verdicts(self):
        # ba is about 5 points above token on every seed, equal to seq within a problem or two,
        # and 20 points below prompt-mean: better, inert, worse, so the claim is refuted.
        with tempfile.TemporaryDirectory() as tmp:
            root, docs = Path(tmp) / "main", Path(tmp) / "docs"
            docs.mkdir()
            n = 300  # held-out problems: accuracies are counts of them
            for s in an.SEEDS:
                j = s % 3 - 1
                right = {"ba": 150 + j, "token": 135 + j + s % 2, "seq": 150 + (1 if s % 2 else -1),
                         "token-group": 210 + j}
                for rule, k in right.items():
                    write_run(root, rule, s, k / n, None)
                    with gzip.open(docs / f"A-{rule}-seed{s}-end.samples.jsonl.gz", "wt") as f:
                        for i in range(n):
                            f.write(json.dumps({"id": f"p{i}", "correct": i < k}) + "\n")
            a = an.analyse(docs, root)
        self.assertEqual(a["runs"], 32)
        self.assertEqual(a["missing"], [])
        self.assertEqual(a["primary"]["token"]["verdict"], "better")
        self.assertAlmostEqual(a["primary"]["token"]["mean"], (15 - 0.5) / 300, places=9)
        self.assertEqual(a["primary"]["seq"]["verdict"], "inert")
        self.assertEqual(a["primary"]["token-group"]["verdict"], "worse")
        self.assertEqual(a["claim"], "refuted")
        self.assertTrue(a["manipulation"]["informative"])  # M1 = 0.8
        self.assertTrue(all(b["samples_agree"] for b in a["by_rule"].values()))
        self.assertEqual(a["secondary"]["per_problem"]["token"]["only_other"], 0)
        self.assertIn("**Claim (BA ends better on a real model): refuted.**", an.report(a))


@unittest.skipUnless((DOCS / "analysis.json").exists() and (DOCS / "runs.tar.gz").exists(),
                     "the study's runs are not all committed yet (docs/study-real/analysis.json)")
class CommittedResult(unittest.TestCase):
    def test_the_committed_runs_give_the_committed_analysis_and_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(DOCS / "runs.tar.gz") as t:
                t.extractall(tmp, filter="data")
            runs = Path(tmp) / "runs" / "study-real" / "main"
            out = subprocess.run([sys.executable, str(HERE / "study_real_analysis.py"), str(DOCS), str(runs)],
                                 check=True, capture_output=True, text=True).stdout
        self.assertEqual(json.loads(out), json.loads((DOCS / "analysis.json").read_text()))
        self.assertEqual(an.report(json.loads(out)), (DOCS / "report.md").read_text())


if __name__ == "__main__":
    unittest.main()

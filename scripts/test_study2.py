#!/usr/bin/env python3
"""Tests of the second study's analysis and decision rules (scripts/study2_analysis.py,
scripts/study2_report.py): the statistics against values worked by hand or by a textbook, the
pre-registered rules on constructed cases (each verdict reachable, each boundary on its side),
and the committed result: the archived runs of docs/study/runs.tar.gz give the committed
docs/study/report.md and docs/study/analysis.json exactly.

Run: python3 -m unittest discover -s scripts -p 'test_*.py'   (standard library only)
"""

import json
import math
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import study2_analysis as an  # noqa: E402
import study2_report as rep  # noqa: E402

ROOT = HERE.parent


class Statistics(unittest.TestCase):
    def test_t_quantile_matches_tables(self):
        # Two-sided 95%: t(0.975; 3) = 3.182, t(0.975; 10) = 2.228, large df -> 1.960.
        self.assertAlmostEqual(an.t_quantile(0.975, 3), 3.1824, places=3)
        self.assertAlmostEqual(an.t_quantile(0.975, 10), 2.2281, places=3)
        self.assertAlmostEqual(an.t_quantile(0.975, 10_000), 1.9602, places=2)

    def test_mean_ci(self):
        ci = an.mean_ci([1.0, 2.0, 3.0, 4.0])
        half = 3.1824 * math.sqrt(5 / 3) / 2
        self.assertAlmostEqual(ci["mean"], 2.5)
        self.assertAlmostEqual(ci["hi"] - ci["mean"], half, places=3)
        self.assertEqual(an.mean_ci([1.0])["lo"], None)
        self.assertIsNone(an.mean_ci([]))

    def test_sign_flip_p(self):
        # Four positive differences: only all-plus and all-minus reach the observed |sum|.
        self.assertEqual(an.sign_flip_p([1.0, 2.0, 3.0, 4.0]), 2 / 16)
        # A zero mean: every flip is at least as extreme.
        self.assertEqual(an.sign_flip_p([1.0, -1.0]), 1.0)

    def test_holm(self):
        # Sorted p 0.01, 0.02, 0.03, 0.04 -> 0.04, 0.06, 0.06, 0.06 (monotone), input order kept.
        adj = an.holm([0.03, 0.01, 0.04, 0.02])
        for got, want in zip(adj, [0.06, 0.04, 0.06, 0.06]):
            self.assertAlmostEqual(got, want)
        self.assertEqual(an.holm([0.5, 0.6]), [1.0, 1.0])

    def test_ols_recovers_a_line(self):
        rows = [([1.0, x], 2.0 + 3.0 * x + (0.01 if x % 2 else -0.01)) for x in range(8)]
        fit = an.ols(rows)
        self.assertAlmostEqual(fit["coefficients"][0]["coef"], 2.0, places=1)
        self.assertAlmostEqual(fit["coefficients"][1]["coef"], 3.0, places=2)
        self.assertGreater(fit["r2"], 0.999)
        self.assertIsNone(an.ols([([1.0, 1.0], 1.0), ([1.0, 2.0], 2.0)]))


def test(mean, lo, hi, p_holm):
    return {"mean": mean, "lo": lo, "hi": hi, "p_holm": p_holm}


class Verdicts(unittest.TestCase):
    def test_each_verdict(self):
        self.assertEqual(an.verdict(test(0.02, 0.01, 0.03, 0.01), +1), "supported")
        self.assertEqual(an.verdict(test(0.02, 0.01, 0.03, 0.01), -1), "refuted")
        self.assertEqual(an.verdict(test(0.0, -0.019, 0.019, 0.5), +1), "inert")
        # Not significant, and the interval reaches past 2 points: undecided.
        self.assertEqual(an.verdict(test(0.01, -0.005, 0.025, 0.2), +1), "undecided")
        # Holm decides, not the raw p: p_t below 0.05 but p_holm above.
        t = test(0.01, 0.001, 0.019, 0.08)
        t["p_t"] = 0.02
        self.assertEqual(an.verdict(t, +1), "inert")
        self.assertEqual(an.verdict(None, +1), "not run")


def analysis(a1, b1, a2=True, a2_hi=0.01):
    """A minimal analysis object with the primary verdicts given and A2 as stated."""
    tests = [{"test": f"A1 {i}", "verdict": v} for i, v in enumerate(a1)]
    tests += [{"test": f"B1 {i}", "verdict": v} for i, v in enumerate(b1)]
    cells = {c: {"non_inferior": a2, "lowest_lo": 0.0 if a2 else -0.02} for c in rep.CELLS}
    contrast = {c: {"hi": a2_hi} for c in rep.CELLS}
    return tests, {
        "A2_non_inferiority": cells,
        "contrasts": {"final_avg": {f"ba-{r}": {"cells": contrast} for r in ("token", "seq", "token-group")}},
    }


class ClaimRules(unittest.TestCase):
    def test_claim_a(self):
        self.assertEqual(rep.claim_a(*analysis(["supported", "supported"], [])), "supported")
        # Both A1 supported, but A2 fails: not supported (and not refuted unless ba is worse).
        self.assertEqual(rep.claim_a(*analysis(["supported", "supported"], [], a2=False)), "undecided")
        self.assertEqual(rep.claim_a(*analysis(["supported", "supported"], [], a2=False, a2_hi=-0.001)), "refuted")
        self.assertEqual(rep.claim_a(*analysis(["refuted", "supported"], [])), "refuted")
        self.assertEqual(rep.claim_a(*analysis(["inert", "inert"], [])), "inert")
        self.assertEqual(rep.claim_a(*analysis(["inert", "undecided"], [])), "undecided")
        self.assertEqual(rep.claim_a(*analysis(["not run", "inert"], [])), "not run")

    def test_claim_b(self):
        tests = lambda vs: analysis([], vs)[0]  # noqa: E731
        self.assertEqual(rep.claim_b(tests(["supported", "supported"])), "supported")
        self.assertEqual(rep.claim_b(tests(["supported", "refuted"])), "refuted")
        self.assertEqual(rep.claim_b(tests(["refuted", "inert"])), "refuted")
        self.assertEqual(rep.claim_b(tests(["inert", "inert"])), "inert")
        self.assertEqual(rep.claim_b(tests(["supported", "inert"])), "undecided")

    def test_a3(self):
        s = lambda t, q, b: {r: {"runs": 3, "collapsed": c} for r, c in zip(("token", "seq", "ba"), (t, q, b))}  # noqa: E731
        self.assertTrue(rep.a3(s(2, 1, 1)))
        self.assertFalse(rep.a3(s(1, 1, 1)))  # no fewer than either
        self.assertFalse(rep.a3(s(0, 3, 1)))  # more than token
        self.assertIsNone(rep.a3({**s(0, 0, 0), "ba": {"runs": 0, "collapsed": 0}}))

    def test_a4(self):
        def dose(aucs, collapses=(0, 0, 0)):
            return [
                {"ba_pos_scale": lam, "avg_auc": auc, "collapses": c}
                for lam, auc, c in zip((1 / 3, 1.0, 3.0), aucs, collapses)
            ]

        self.assertTrue(rep.a4(dose((0.55, 0.58, 0.56))))
        self.assertFalse(rep.a4(dose((0.57, 0.58, 0.56))))  # 1/3 costs only 1 point
        self.assertFalse(rep.a4(dose((0.55, 0.58, 0.59))))  # 3 is better
        self.assertIsNone(rep.a4(dose((0.55, None, 0.56))))

    def test_m1(self):
        fit = lambda lo, hi: {"coefficients": [{}, {"coef": (lo + hi) / 2, "lo": lo, "hi": hi}]}  # noqa: E731
        self.assertTrue(rep.m1({"entropy_slope": fit(-2, -1), "pass_gap": fit(-2, -0.1)}))
        self.assertFalse(rep.m1({"entropy_slope": fit(-2, -1), "pass_gap": fit(-2, 0.1)}))
        self.assertIsNone(rep.m1({"entropy_slope": fit(-2, -1)}))
        self.assertEqual(rep.slope_sign({"lo": 0.1, "hi": 0.2}), "positive")


class CommittedResult(unittest.TestCase):
    def test_archived_runs_give_the_committed_report(self):
        archive = ROOT / "docs/study/runs.tar.gz"
        if not archive.is_file():
            self.skipTest("no docs/study/runs.tar.gz")
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(archive) as tar:
                # The "data" filter where this Python has it (3.11.4 on); the archive is ours.
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, filter="data")
                else:
                    tar.extractall(tmp)
            analysis_json = subprocess.run(
                [sys.executable, str(HERE / "study2_analysis.py"), "runs/study2"],
                cwd=tmp, check=True, capture_output=True, text=True,
            ).stdout
            self.assertEqual(json.loads(analysis_json), json.loads((ROOT / "docs/study/analysis.json").read_text()))
            path = Path(tmp) / "analysis.json"
            path.write_text(analysis_json)
            report = subprocess.run(
                [sys.executable, str(HERE / "study2_report.py"), str(path)],
                check=True, capture_output=True, text=True,
            ).stdout
            self.assertEqual(report, (ROOT / "docs/study/report.md").read_text())


if __name__ == "__main__":
    unittest.main()

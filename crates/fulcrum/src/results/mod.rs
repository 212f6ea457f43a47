//! The results code `compare`, `report` and `eval` share: the statistics ([`stats`]), what a
//! comparison concludes from its runs and its table ([`summary`]: per-run measures, means with
//! confidence intervals over seeds, paired contrasts between rules, relations to the length
//! diagnostics), and the evaluation table. Runs are read with `fulcrum_train::RunData`.

pub mod stats;
pub mod summary;

use fulcrum_train::EvalResult;

/// The table of `fulcrum eval`: one row per benchmark `(name, result, seconds)`.
pub fn eval_table(rows: &[(String, EvalResult, f64)]) -> String {
    let mut out = format!(
        "{:<16} {:>8} {:>4} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8}\n",
        "bench", "problems", "k", "avg@k", "pass@k", "mean len", "truncated", "seconds", "tok/s"
    );
    for (n, r, secs) in rows {
        out.push_str(&format!(
            "{:<16} {:>8} {:>4} {:>10.4} {:>10.4} {:>9.1} {:>9.3} {:>9.1} {:>8.1}\n",
            n,
            r.prompts,
            r.k,
            r.accuracy,
            r.pass_at_k,
            r.mean_len,
            r.truncated,
            secs,
            r.tokens_per_s
        ));
    }
    out
}

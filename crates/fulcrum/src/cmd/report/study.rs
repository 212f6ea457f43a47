//! The study charts of a comparison over several tasks: the final accuracy difference
//! `token - seq` against the measured length CV and +/- gap, one point per task, with the fit.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::charts;
use crate::results::summary::ComparisonSummary;

/// `token - seq` against each length diagnostic, one point per task.
pub(super) fn study_charts(s: &ComparisonSummary, out: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut drawn = Vec::new();
    for (x, x_label, file) in [
        (
            "len_cv",
            "within-group length CV (mean over steps and runs)",
            "study-cv.png",
        ),
        (
            "len_gap_rel",
            "relative ± length gap (L- − L+) / L (mean over steps and runs)",
            "study-gap.png",
        ),
    ] {
        let points: Vec<charts::Point> = s
            .contrasts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let d = c.final_accuracy_diff.get("token-seq")?;
                let xv = if x == "len_cv" {
                    c.length.len_cv?
                } else {
                    c.length.len_gap_rel?
                };
                Some(charts::Point {
                    label: format!(" S{}", i + 1),
                    x: xv,
                    y: d.mean,
                    err: d.ci95,
                })
            })
            .collect();
        if points.len() < 2 {
            continue;
        }
        let fit = s
            .relations
            .iter()
            .find(|r| r.x == [x])
            .map(|r| (r.fit.intercept, r.fit.slopes[0], r.fit.r2));
        let title = format!(
            "Final accuracy token − seq vs {}",
            if x == "len_cv" { "length CV" } else { "± gap" }
        );
        let path = out.join(file);
        if charts::scatter(
            &path,
            &title,
            x_label,
            "token − seq (held-out accuracy)",
            &points,
            fit,
        )? {
            drawn.push((title, path));
        }
    }
    Ok(drawn)
}

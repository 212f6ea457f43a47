//! `fulcrum report DIR`: charts (PNG) and one self-contained HTML page (images embedded as
//! base64, no network) for a run directory or a `fulcrum compare` directory.
//!
//! Per task: reward and held-out accuracy over steps (per rule, the mean over seeds with a
//! min-max band) and, in a comparison, each rule's accuracy minus `ba`'s paired by seed;
//! response length (positive, negative, all), the +/- length gap, the mass ratio
//! of each rule, entropy, gradient norm and clip fraction; for a comparison of several tasks
//! with `token` and `seq`, the accuracy difference `token - seq` against the measured length CV
//! and +/- gap with the fitted line; and the summary table of `compare`.

//!
//! Files: `source.rs` reads what to draw, `task_charts.rs` and `study.rs` draw it
//! (`charts.rs`: the plotting, `font.rs`: the font), `html.rs` assembles the page.

mod charts;
mod font;
mod html;
mod source;
mod study;
mod task_charts;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::results::summary;
use source::Source;
use study::study_charts;
use task_charts::task_charts;

/// Flags of `fulcrum report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run directory (`fulcrum train`) or a comparison directory (`fulcrum compare --out`).
    pub dir: PathBuf,
    /// Where to write the charts and `index.html` [default: DIR/report].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// TrueType/OpenType font for the charts [default: DejaVu Sans, Liberation Sans or Noto
    /// Sans from the Debian font packages].
    #[arg(long)]
    pub font: Option<PathBuf>,
}

/// A finished run's report (charts and `index.html` in `dir/report`): the chart images' paths,
/// none when it could not be drawn (said on stderr). The dashboards show them at a run's end.
pub fn draw_run_charts(dir: &Path) -> Vec<PathBuf> {
    let out = dir.join("report");
    let args = Args {
        dir: dir.to_path_buf(),
        out: Some(out.clone()),
        font: None,
    };
    if let Err(e) = run(args) {
        eprintln!("fulcrum: the run's charts were not drawn: {e:#}");
        return Vec::new();
    }
    let mut charts: Vec<PathBuf> = fs::read_dir(&out)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    charts.retain(|p| p.extension().is_some_and(|x| x == "png"));
    charts.sort();
    charts
}

pub fn run(args: Args) -> Result<ExitCode> {
    font::register(args.font.as_deref())?;
    let src = Source::load(&args.dir)?;
    let out = args.out.clone().unwrap_or_else(|| args.dir.join("report"));
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut sections: Vec<html::Section> = Vec::new();
    if src.is_compare {
        let study = study_charts(&src.summary, &out)?;
        if !study.is_empty() {
            let legend = src
                .summary
                .tasks
                .iter()
                .enumerate()
                .map(|(i, t)| format!("S{} = {t}", i + 1))
                .collect();
            sections.push(html::Section {
                heading: "token − seq against the length diagnostics".into(),
                notes: legend,
                images: study,
            });
        }
    }
    if !src.unfinished.is_empty() {
        sections.push(html::Section {
            heading: "Unfinished runs (left out)".into(),
            notes: src.unfinished.clone(),
            images: Vec::new(),
        });
    }
    for task in src
        .tasks
        .iter()
        .filter(|t| src.runs.iter().any(|(rt, _, _)| rt == *t))
    {
        let images = task_charts(&src, task, &out)?;
        sections.push(html::Section {
            heading: format!("Task {task}"),
            notes: Vec::new(),
            images,
        });
    }
    let table = summary::table(&src.summary);
    // The table as the page shows it (for a partly run comparison, over the finished runs).
    let md = out.join("summary.md");
    fs::write(&md, &table).with_context(|| format!("writing {}", md.display()))?;
    let page = html::page(&args.dir, &table, &sections)?;
    let index = out.join("index.html");
    fs::write(&index, page).with_context(|| format!("writing {}", index.display()))?;
    println!("{}", index.display());
    Ok(ExitCode::SUCCESS)
}

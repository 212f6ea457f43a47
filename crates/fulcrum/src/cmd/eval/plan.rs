//! What each benchmark of `fulcrum eval` runs with: its flags, else the `--protocol` preset,
//! else the defaults of its family; and how many of its problems.

use anyhow::{bail, Result};
use fulcrum_tasks::data::registry::Benchmark;

/// Problems of a generated task (no fixed size) when `--prompts` is not given.
pub const GENERATED_PROBLEMS: usize = 128;

/// The response length limit of tasks outside the registry (generated tasks, data files).
pub const OTHER_MAX_NEW_TOKENS: usize = 512;

/// Evaluation protocols with their own benchmarks and settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// The paper's six math benchmarks: avg@32 on AIME24, AIME25 and AMC23, avg@4 on MATH-500,
    /// Minerva and OlympiadBench, all at temperature 1.0 with 8192-token responses.
    Paper,
}

/// One benchmark's settings in a protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PresetRow {
    pub bench: &'static str,
    /// Responses per problem; avg@k and pass@k are reported for this k.
    pub k: usize,
    pub temperature: f64,
    pub max_new_tokens: usize,
}

/// `--protocol paper`. The paper's own text is not available to us; these are the settings of
/// the recipes its runs follow (DAPO reports avg@32 on AIME at temperature 1.0; the paper-scale
/// configs here train at temperature 1.0 with 8192-token responses and evaluate AIME with
/// avg@32 at 1.0). The small sets (30 and 40 problems, one problem is 2.5-3.3 points) get 32
/// responses each to shrink the sampling noise; the larger ones (272-675 problems) 4.
#[rustfmt::skip]
pub const PAPER: [PresetRow; 6] = [
    PresetRow { bench: "aime24", k: 32, temperature: 1.0, max_new_tokens: 8192 },
    PresetRow { bench: "aime25", k: 32, temperature: 1.0, max_new_tokens: 8192 },
    PresetRow { bench: "amc23", k: 32, temperature: 1.0, max_new_tokens: 8192 },
    PresetRow { bench: "math500", k: 4, temperature: 1.0, max_new_tokens: 8192 },
    PresetRow { bench: "minerva", k: 4, temperature: 1.0, max_new_tokens: 8192 },
    PresetRow { bench: "olympiadbench", k: 4, temperature: 1.0, max_new_tokens: 8192 },
];

impl Protocol {
    /// The protocol's rows.
    pub fn rows(self) -> &'static [PresetRow] {
        match self {
            Protocol::Paper => &PAPER,
        }
    }

    /// Its name as `--protocol` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Paper => "paper",
        }
    }

    /// The row of a benchmark name, if the protocol has one.
    pub fn row(self, bench: &str) -> Option<PresetRow> {
        self.rows().iter().copied().find(|r| r.bench == bench)
    }
}

/// The flags that override a preset and the defaults (`None`: not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    pub k: Option<usize>,
    pub samples_per_problem: Option<usize>,
    pub temperature: Option<f64>,
    pub max_new_tokens: Option<usize>,
    pub prompts: Option<usize>,
}

/// How one benchmark is evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPlan {
    pub k: usize,
    /// Responses per problem (n >= k).
    pub n: usize,
    pub temperature: f64,
    pub max_new_tokens: usize,
    /// Where the length limit comes from, for the log ("code default", "--max-new-tokens", ...).
    pub max_new_tokens_from: String,
    /// Problems evaluated: the first `problems` of the task's seeded order.
    pub problems: usize,
    /// The task's full size; `None` for a generated task.
    pub problems_total: Option<usize>,
    /// Said once before the evaluation (e.g. `--prompts` above the benchmark's size).
    pub notes: Vec<String>,
}

impl BenchPlan {
    /// Whether the problems are fewer than the whole finite set.
    pub fn is_subset(&self) -> bool {
        self.problems_total.is_some_and(|t| self.problems < t)
    }
}

/// The plan of benchmark `name` (a task spec's name: `humaneval`, `jsonl`, `arithmetic`, ...)
/// whose test split holds `total` problems (`None`: generated).
pub fn plan(
    name: &str,
    total: Option<usize>,
    protocol: Option<Protocol>,
    o: &Overrides,
) -> Result<BenchPlan> {
    let preset = protocol.and_then(|p| p.row(name).map(|r| (p, r)));
    let k = o.k.or(preset.map(|(_, r)| r.k)).unwrap_or(1);
    let n = o.samples_per_problem.unwrap_or(k);
    if k == 0 || n == 0 {
        bail!("--k and --samples-per-problem must be >= 1");
    }
    if n < k {
        bail!(
            "--samples-per-problem {n} is less than k = {k}{}: pass@k needs at least k responses \
             per problem",
            if o.k.is_some() {
                " (--k)".to_string()
            } else {
                format!(
                    " (the {} protocol's k for {name})",
                    protocol.map_or("", Protocol::name)
                )
            }
        );
    }
    let temperature = o
        .temperature
        .or(preset.map(|(_, r)| r.temperature))
        .unwrap_or(0.0);
    let family = Benchmark::find(name).map(|b| b.family);
    let (max_new_tokens, max_new_tokens_from) = match (o.max_new_tokens, preset, family) {
        (Some(m), _, _) => (m, "--max-new-tokens".to_string()),
        (None, Some((p, r)), _) => (r.max_new_tokens, format!("{} protocol", p.name())),
        (None, None, Some(f)) => (f.max_new_tokens(), format!("{} default", f.name())),
        (None, None, None) => (OTHER_MAX_NEW_TOKENS, "default".to_string()),
    };
    if max_new_tokens == 0 {
        bail!("--max-new-tokens must be >= 1");
    }
    let mut notes = Vec::new();
    let problems = match (total, o.prompts) {
        (_, Some(0)) => bail!("--prompts must be >= 1"),
        (Some(0), _) => bail!("{name} has no problems"),
        (Some(t), Some(p)) if p > t => {
            notes.push(format!(
                "--prompts {p} is more than its {t} problems: all {t} are evaluated"
            ));
            t
        }
        (Some(t), p) => p.unwrap_or(t),
        (None, p) => p.unwrap_or(GENERATED_PROBLEMS),
    };
    if protocol.is_some() && preset.is_none() {
        notes.push(format!(
            "not in the {} protocol: its defaults apply",
            protocol.map_or("", Protocol::name)
        ));
    }
    Ok(BenchPlan {
        k,
        n,
        temperature,
        max_new_tokens,
        max_new_tokens_from,
        problems,
        problems_total: total,
        notes,
    })
}

/// How the problems were chosen, for every output: `None` for a whole finite set.
pub fn subset_rule(plan: &BenchPlan, seed: u64) -> Option<String> {
    match plan.problems_total {
        Some(t) if plan.problems < t => Some(format!(
            "the first {} of {t} problems in the fixed seeded order (seed {seed}), not the whole set",
            plan.problems
        )),
        Some(_) => None,
        None => Some(format!(
            "{} problems of a generated task (no fixed size; --prompts sets how many, default {})",
            plan.problems, GENERATED_PROBLEMS
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_set_the_length_limit_and_whole_sets_are_the_default() -> Result<()> {
        let none = Overrides::default();
        for (name, want, from) in [
            ("humaneval", 512, "code default"),
            ("mbpp", 512, "code default"),
            ("gsm8k", 1024, "grade-school math default"),
            ("math500", 2048, "math default"),
            ("minerva", 2048, "math default"),
            ("aime24", 4096, "competition math default"),
            ("olympiadbench", 4096, "competition math default"),
            ("jsonl", 512, "default"),
            ("arithmetic", 512, "default"),
        ] {
            let p = plan(name, Some(164), None, &none)?;
            assert_eq!(
                (p.max_new_tokens, p.max_new_tokens_from.as_str()),
                (want, from)
            );
            assert_eq!((p.k, p.n, p.temperature), (1, 1, 0.0), "{name}");
            assert_eq!(p.problems, 164, "{name}: the whole set by default");
            assert!(!p.is_subset());
        }
        let generated = plan("arithmetic", None, None, &none)?;
        assert_eq!(generated.problems, GENERATED_PROBLEMS);
        assert!(subset_rule(&generated, 0).is_some_and(|s| s.contains("generated")));
        Ok(())
    }

    #[test]
    fn prompts_take_a_labelled_subset_and_never_more_than_the_set() -> Result<()> {
        let o = |p: usize| Overrides {
            prompts: Some(p),
            ..Overrides::default()
        };
        let p = plan("humaneval", Some(164), None, &o(30))?;
        assert_eq!(p.problems, 30);
        assert!(p.is_subset());
        let rule = subset_rule(&p, 7).unwrap_or_default();
        assert!(
            rule.contains("first 30 of 164") && rule.contains("seed 7"),
            "{rule}"
        );
        let all = plan("humaneval", Some(164), None, &o(1000))?;
        assert_eq!(all.problems, 164);
        assert!(all.notes[0].contains("all 164"), "{:?}", all.notes);
        assert_eq!(subset_rule(&all, 0), None);
        assert!(plan("humaneval", Some(164), None, &o(0)).is_err());
        assert_eq!(plan("arithmetic", None, None, &o(9))?.problems, 9);
        Ok(())
    }

    #[test]
    fn the_paper_protocol_sets_k_temperature_and_length_and_flags_override_it() -> Result<()> {
        let paper = Some(Protocol::Paper);
        let none = Overrides::default();
        let aime = plan("aime24", Some(30), paper, &none)?;
        assert_eq!((aime.k, aime.n, aime.temperature), (32, 32, 1.0));
        assert_eq!(aime.max_new_tokens, 8192);
        assert_eq!(aime.max_new_tokens_from, "paper protocol");
        let math = plan("math500", Some(500), paper, &none)?;
        assert_eq!((math.k, math.n, math.problems), (4, 4, 500));
        let names: Vec<&str> = PAPER.iter().map(|r| r.bench).collect();
        assert_eq!(
            names,
            [
                "aime24",
                "aime25",
                "amc23",
                "math500",
                "minerva",
                "olympiadbench"
            ]
        );
        for r in PAPER {
            assert!(
                Benchmark::find(r.bench).is_some(),
                "{} is registered",
                r.bench
            );
        }
        // Explicit flags win over the preset.
        let o = Overrides {
            k: Some(8),
            temperature: Some(0.6),
            max_new_tokens: Some(100),
            ..Overrides::default()
        };
        let p = plan("aime24", Some(30), paper, &o)?;
        assert_eq!(
            (p.k, p.n, p.temperature, p.max_new_tokens),
            (8, 8, 0.6, 100)
        );
        let more = Overrides {
            samples_per_problem: Some(64),
            ..Overrides::default()
        };
        assert_eq!(plan("amc23", Some(40), paper, &more)?.n, 64);
        // Outside the preset: the family defaults, said so.
        let gsm = plan("gsm8k", Some(1319), paper, &none)?;
        assert_eq!((gsm.k, gsm.temperature, gsm.max_new_tokens), (1, 0.0, 1024));
        assert!(gsm
            .notes
            .iter()
            .any(|n| n.contains("not in the paper protocol")));
        Ok(())
    }

    #[test]
    fn fewer_responses_than_k_are_refused_naming_both() {
        let o = Overrides {
            k: Some(4),
            samples_per_problem: Some(2),
            ..Overrides::default()
        };
        let e = plan("humaneval", Some(164), None, &o)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--samples-per-problem 2") && e.contains("--k"),
            "{e}"
        );
        let short = Overrides {
            samples_per_problem: Some(8),
            ..Overrides::default()
        };
        let e = plan("aime24", Some(30), Some(Protocol::Paper), &short)
            .unwrap_err()
            .to_string();
        assert!(e.contains("paper protocol"), "{e}");
    }
}

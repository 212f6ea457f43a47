//! The synthetic families through the task factory: determinism by seed, disjoint splits,
//! clean demonstrations scoring full reward, the mistake rate, the character vocabulary, and
//! answer-only demonstrations at length 0.

use fulcrum_tasks::{create_task, CharVocab, Family, Result, Split, TaskConfig};

fn cfg(name: &str, mistake_rate: f64) -> TaskConfig {
    TaskConfig {
        name: name.into(),
        difficulty: 4,
        mistake_rate,
        ..TaskConfig::default()
    }
}

#[test]
fn same_seed_gives_same_examples_and_other_seed_differs() -> Result<()> {
    for &f in Family::ALL {
        let t = create_task(&cfg(f.name(), 0.2))?;
        let a = t.examples(Split::Train, 5, 20)?;
        assert_eq!(a, t.examples(Split::Train, 5, 20)?);
        assert_ne!(a, t.examples(Split::Train, 6, 20)?, "{}", f.name());
    }
    Ok(())
}

#[test]
fn train_and_test_prompts_never_overlap() -> Result<()> {
    for &f in Family::ALL {
        let t = create_task(&cfg(f.name(), 0.0))?;
        let train: std::collections::HashSet<String> = t
            .examples(Split::Train, 1, 300)?
            .into_iter()
            .map(|e| e.prompt)
            .collect();
        for e in t.examples(Split::Test, 1, 30)? {
            assert!(!train.contains(&e.prompt), "{}: {}", f.name(), e.prompt);
        }
    }
    Ok(())
}

#[test]
fn clean_demonstrations_score_full_reward() -> Result<()> {
    for &f in Family::ALL {
        let t = create_task(&cfg(f.name(), 0.0))?;
        for e in t.examples(Split::Train, 3, 50)? {
            let demo = e.demonstration.clone().unwrap_or_default();
            let s = t.score(&e, &demo);
            assert!(s.correct, "{}: {} -> {}", f.name(), demo, s.reason);
            assert!(!t.score(&e, "Answer: 0 0").correct || e.answer == "0 0");
        }
    }
    Ok(())
}

#[test]
fn mistake_rate_sets_fraction_of_wrong_demonstrations() -> Result<()> {
    for &f in Family::ALL {
        let t = create_task(&cfg(f.name(), 0.3))?;
        let ex = t.examples(Split::Train, 9, 400)?;
        let wrong = ex
            .iter()
            .filter(|e| !t.score(e, e.demonstration.as_deref().unwrap_or("")).correct)
            .count() as f64
            / ex.len() as f64;
        assert!((0.2..0.4).contains(&wrong), "{}: {wrong}", f.name());
    }
    Ok(())
}

#[test]
fn all_text_fits_the_char_vocabulary() -> Result<()> {
    let v = CharVocab;
    for &f in Family::ALL {
        for d in [1, 5, 10] {
            let t = create_task(&TaskConfig {
                difficulty: d,
                length: 2.0,
                ..cfg(f.name(), 0.5)
            })?;
            for e in t.examples(Split::Train, 2, 30)? {
                let demo = e.demonstration.unwrap_or_default();
                assert!(
                    v.covers(&e.prompt) && v.covers(&demo) && v.covers(&e.answer),
                    "{demo}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn length_zero_gives_answer_only_demonstrations() -> Result<()> {
    for &f in Family::ALL {
        let t = create_task(&TaskConfig {
            length: 0.0,
            ..cfg(f.name(), 0.0)
        })?;
        for e in t.examples(Split::Train, 4, 10)? {
            let demo = e.demonstration.unwrap_or_default();
            assert!(demo.starts_with("Answer:"), "{}: {demo}", f.name());
        }
    }
    Ok(())
}

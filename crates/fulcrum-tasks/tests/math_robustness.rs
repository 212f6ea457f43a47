//! The math checker never panics and stays fast on adversarial input.
//!
//! A property test feeds random strings (biased towards LaTeX-ish characters) as both response
//! and gold; a table of hostile inputs (deep nesting, huge numbers and exponents, 1 MB strings,
//! unbalanced braces, many boxes) must each be checked in under 10 ms of CPU time (thread CPU time, so
//! that other work on a shared machine does not count).

use std::time::Duration;

use fulcrum_tasks::math::{check, equivalent, MathOptions};
use proptest::prelude::*;

const LIMIT: Duration = Duration::from_millis(10);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_latex_never_panics(
        response in "[0-9a-z\\\\{}()\\[\\]^_.,=+*/ $-]{0,80}",
        gold in "[0-9a-z\\\\{}()\\[\\]^_.,=+*/ $-]{0,40}",
    ) {
        let _ = check(&response, &gold, &MathOptions::default());
        let _ = equivalent(&gold, &response);
    }

    #[test]
    fn any_unicode_never_panics(response in "\\PC{0,60}", gold in "\\PC{0,20}") {
        let _ = check(&response, &gold, &MathOptions::default());
    }

    #[test]
    fn an_answer_always_matches_itself_in_a_box(n in -1_000_000i64..1_000_000, d in 1i64..1000) {
        let gold = format!("\\frac{{{n}}}{{{d}}}");
        let r = check(&format!("so \\boxed{{{gold}}}"), &gold, &MathOptions::default());
        prop_assert!(r.equivalent);
    }
}

/// CPU time of this thread (so other processes on a shared machine do not count).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a local timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The smallest CPU time of three runs of `f`: the cost of the input, not scheduling noise.
fn cost(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let start = thread_cpu();
            f();
            thread_cpu().saturating_sub(start)
        })
        .min()
        .unwrap_or_default()
}

fn hostile_inputs() -> Vec<(String, String)> {
    let mb = 1 << 20;
    vec![
        (
            "deep parens".into(),
            format!("\\boxed{{{}1{}}}", "(".repeat(5000), ")".repeat(5000)),
        ),
        (
            "deep braces".into(),
            format!("\\boxed{{{}1{}}}", "{".repeat(5000), "}".repeat(5000)),
        ),
        (
            "deep fracs".into(),
            format!(
                "\\boxed{{{}1{}}}",
                "\\frac{1}{".repeat(3000),
                "}".repeat(3000)
            ),
        ),
        (
            "huge number".into(),
            format!("\\boxed{{{}}}", "9".repeat(5000)),
        ),
        ("huge exponent".into(), "\\boxed{2^{99999999999}}".into()),
        ("tower".into(), "\\boxed{9^{9^{9^{9^{9^{9}}}}}}".into()),
        ("huge sci".into(), "\\boxed{1e999999999}".into()),
        ("big factorial".into(), "\\boxed{100000!}".into()),
        ("1 MB of digits".into(), "7".repeat(mb)),
        (
            "1 MB of text then box".into(),
            format!("{}\\boxed{{5}}", "a".repeat(mb)),
        ),
        (
            "1 MB inside a box".into(),
            format!("\\boxed{{{}}}", "1+".repeat(mb / 2)),
        ),
        (
            "1 MB of opening braces".into(),
            format!("\\boxed{{{}", "{".repeat(mb)),
        ),
        ("1 MB of boxes".into(), "\\boxed{1}".repeat(mb / 9)),
        ("1 MB of Answer lines".into(), "Answer: 3\n".repeat(mb / 10)),
        (
            "1 MB of commas".into(),
            format!("\\boxed{{{}}}", "1,".repeat(mb / 2)),
        ),
        (
            "many unions".into(),
            format!("\\boxed{{{}}}", "(1,2)\\cup".repeat(300)),
        ),
        (
            "many variables".into(),
            format!("\\boxed{{{}}}", "x^{y^{z}}+".repeat(150)),
        ),
        ("1 MB of backslashes".into(), "\\".repeat(mb)),
        (
            "1 MB of multibyte".into(),
            "\u{00e9}\u{4e2d}".repeat(mb / 5),
        ),
    ]
}

#[test]
fn hostile_answers_are_checked_in_under_10_ms() {
    let golds = ["5", "\\frac{1}{2}", "(1,2)", &"9".repeat(5000)];
    let mut worst = (Duration::ZERO, String::new());
    for (name, response) in hostile_inputs() {
        for gold in golds {
            let took = cost(|| {
                let _ = check(&response, gold, &MathOptions::default());
            });
            assert!(took < LIMIT, "{name} against gold {:.10}: {took:?}", gold);
            if took > worst.0 {
                worst = (took, name.clone());
            }
        }
        // The hostile text as the gold too.
        let took = cost(|| {
            let _ = equivalent(&response, "5");
        });
        assert!(took < LIMIT, "{name} as gold: {took:?}");
    }
    eprintln!("slowest hostile check: {} in {:?} of CPU", worst.1, worst.0);
}

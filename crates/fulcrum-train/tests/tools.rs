//! The trainer's tool turns on the built-in model's tokenizer, with a scripted response: a call
//! is seen exactly when its closing fence is written, the sandbox answers it (output, a crash,
//! a timeout), the answer is what the model reads next, and calls past `rollout.max_turns` are
//! not answered.

use fulcrum_model::turns::Turns;
use fulcrum_model::Model;
use fulcrum_tasks::code::CodeRunner;
use fulcrum_tasks::tools::{ToolFormat, ToolName};
use fulcrum_tasks::TaskConfig;
use fulcrum_train::tools::ToolTurns;
use tch::Device;

fn task() -> TaskConfig {
    TaskConfig {
        tools: vec![ToolName::Python],
        tool_format: ToolFormat::Code,
        tool_timeout_s: 2.0,
        ..TaskConfig::default()
    }
}

/// Feeds `text` to `turns` token by token as the sampler would (after `before`, a response so
/// far); returns the index of the token at which a call was seen, if one was.
fn feed(
    turns: &mut ToolTurns,
    model: &Model,
    before: &[i64],
    tool: &[bool],
    text: &str,
) -> (Vec<i64>, Vec<bool>, Option<usize>) {
    let ids = model.tokenizer().unwrap().encode(text).unwrap();
    let (mut tokens, mut mask) = (before.to_vec(), tool.to_vec());
    for (k, &id) in ids.iter().enumerate() {
        tokens.push(id);
        mask.push(false);
        if turns.call_ended(0, &tokens, &mask).unwrap() {
            return (tokens, mask, Some(k));
        }
    }
    (tokens, mask, None)
}

#[test]
fn calls_are_seen_at_their_closing_fence_answered_and_limited() {
    let model = Model::tiny(Device::Cpu, 0).unwrap();
    let runner = CodeRunner::detect().with_wall(std::time::Duration::from_secs(2));
    let task = task();
    let mut turns = ToolTurns::new(&model, &task, &runner, 2).unwrap();
    let tok = model.tokenizer().unwrap();

    let call = "Compute it.\n```python\nprint(6 * 7)\n```";
    let (tokens, mut mask, at) = feed(&mut turns, &model, &[], &[], call);
    assert_eq!(
        at,
        Some(call.len() - 1),
        "seen at the last character, not before"
    );
    let answers = turns.respond(&[(0, &tokens)]).unwrap();
    let answer = tok.decode(&answers[0], false).unwrap();
    if runner.refused().is_none() {
        assert_eq!(answer, "\n```output\n42\n```\n");
    } else {
        assert!(answer.contains("could not be run"), "{answer}");
    }
    // The answer is context: the next turn starts after it.
    let mut tokens = tokens;
    tokens.extend(&answers[0]);
    mask.extend(std::iter::repeat_n(true, answers[0].len()));
    let (tokens, mut mask, at) = feed(
        &mut turns,
        &model,
        &tokens,
        &mask,
        "So 42.\n```python\n1 / 0\n```",
    );
    assert!(at.is_some());
    let crash = tok
        .decode(&turns.respond(&[(0, &tokens)]).unwrap()[0], false)
        .unwrap();
    if runner.refused().is_none() {
        assert!(crash.contains("ZeroDivisionError"), "{crash}");
    }
    let mut tokens = tokens;
    mask.resize(tokens.len(), false);
    tokens.push(tok.encode("\n").unwrap()[0]);
    mask.push(true);
    // Two calls answered: a third is not (rollout.max_turns = 2).
    let (_, _, at) = feed(
        &mut turns,
        &model,
        &tokens,
        &mask,
        "```python\nprint(1)\n```",
    );
    assert_eq!(at, None);
    assert_eq!(turns.stats.calls, 2);
    assert_eq!(
        turns.stats.errors,
        1 + usize::from(runner.refused().is_some())
    );
}

#[test]
fn a_call_past_the_time_limit_is_stopped_and_said() {
    let model = Model::tiny(Device::Cpu, 0).unwrap();
    let runner = CodeRunner::detect().with_wall(std::time::Duration::from_secs(1));
    if runner.refused().is_some() {
        return; // no sandbox here: nothing runs (the refusal is tested above)
    }
    let task = task();
    let mut turns = ToolTurns::new(&model, &task, &runner, 4).unwrap();
    let (tokens, _, at) = feed(
        &mut turns,
        &model,
        &[],
        &[],
        "```python\nwhile True: pass\n```",
    );
    assert!(at.is_some());
    let answer = model
        .tokenizer()
        .unwrap()
        .decode(&turns.respond(&[(0, &tokens)]).unwrap()[0], false)
        .unwrap();
    assert!(answer.contains("time limit"), "{answer}");
    assert_eq!(turns.stats.timeouts, 1);
}

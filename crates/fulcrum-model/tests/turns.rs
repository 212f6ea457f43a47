//! Multi-turn sampling (`generate_turns`): a scripted tool answers each row after a few of its
//! own tokens; what the rows sample after an answer must be what a full forward over the whole
//! context (prompt, own tokens, answers) gives, whatever else is in the batch.

use std::path::PathBuf;

use fulcrum_model::turns::Turns;
use fulcrum_model::{
    generate, generate_turns, sequence_logprobs, Finish, Model, SampleRequest, Sampling,
};
use tch::{Device, Kind, Tensor};

fn model() -> anyhow::Result<Model> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2");
    Ok(Model::load_hf(&dir, Device::Cpu)?)
}

const SAMPLE: Sampling = Sampling::Sample {
    temperature: 1.0,
    top_k: None,
    top_p: None,
};

fn request(prompts: Vec<Vec<i64>>, g: usize, n: usize) -> SampleRequest {
    SampleRequest {
        first_prompt: 0,
        prompts,
        samples_per_prompt: g,
        max_new_tokens: n,
        sampling: SAMPLE,
        seed: 23,
        stop_token_ids: vec![],
        stop_strings: vec![],
    }
}

/// A call ends after `every` own tokens since the last answer (at most `max_calls` per row);
/// row `r`'s answer is `r % 3 + 1` tokens (answers of unequal lengths in one block).
struct Scripted {
    every: usize,
    max_calls: usize,
    calls: Vec<usize>,
}

impl Turns for Scripted {
    fn call_ended(
        &mut self,
        row: usize,
        _tokens: &[i64],
        tool: &[bool],
    ) -> fulcrum_model::Result<bool> {
        let since = tool.iter().rev().take_while(|&&t| !t).count();
        Ok(since == self.every && self.calls[row] < self.max_calls)
    }

    fn respond(&mut self, calls: &[(usize, &[i64])]) -> fulcrum_model::Result<Vec<Vec<i64>>> {
        Ok(calls
            .iter()
            .map(|&(row, _)| {
                self.calls[row] += 1;
                (0..row % 3 + 1).map(|k| 40 + (row + k) as i64).collect()
            })
            .collect())
    }
}

/// The log-probability of every response token under a full forward of prompt + response.
fn full_forward(model: &Model, prompt: &[i64], tokens: &[i64]) -> anyhow::Result<Vec<f32>> {
    let ids: Vec<i64> = prompt.iter().chain(tokens).copied().collect();
    let input = Tensor::from_slice(&ids).view([1, ids.len() as i64]);
    let lp = tch::no_grad(|| sequence_logprobs(model.net(), &input, 1.0))?;
    let all = Vec::<f32>::try_from(lp.logprobs.to_kind(Kind::Float).flatten(0, -1))?;
    Ok(all[prompt.len() - 1..].to_vec())
}

#[test]
fn answers_extend_the_cache_as_a_full_forward_would() -> anyhow::Result<()> {
    let model = model()?;
    // Prompts of unequal lengths (left padding) and three samples each: six rows.
    let prompts = vec![vec![5, 9, 33, 2, 71, 8, 8], vec![11, 3, 60]];
    let mut turns = Scripted {
        every: 3,
        max_calls: 2,
        calls: vec![0; 6],
    };
    let out = generate_turns(
        model.net(),
        &request(prompts.clone(), 3, 24),
        None,
        &mut turns,
    )?;
    assert_eq!(out.len(), 6);
    for (r, c) in out.iter().enumerate() {
        assert_eq!(c.tokens.len(), c.tool.len());
        assert_eq!(c.tokens.len(), c.logprobs.len());
        // Two calls, each after 3 own tokens, each answered by r % 3 + 1 tool tokens.
        let answer: Vec<i64> = (0..r % 3 + 1).map(|k| 40 + (r + k) as i64).collect();
        let n = answer.len();
        assert_eq!(&c.tokens[3..3 + n], answer.as_slice(), "row {r}");
        assert_eq!(&c.tokens[6 + n..6 + 2 * n], answer.as_slice(), "row {r}");
        let tools = c.tool.iter().filter(|&&t| t).count();
        assert_eq!(tools, 2 * n, "row {r}");
        assert_eq!(c.tokens.len(), 24);
        assert_eq!(c.finish, Finish::Length);
        // Every own token's log-probability is what a full forward over the context says.
        let full = full_forward(&model, &prompts[r / 3], &c.tokens)?;
        for j in (0..c.tokens.len()).filter(|&j| !c.tool[j]) {
            let d = (full[j] - c.logprobs[j]).abs();
            assert!(
                d < 1e-4,
                "row {r} token {j}: cache {} full {}",
                c.logprobs[j],
                full[j]
            );
        }
        for j in (0..c.tokens.len()).filter(|&j| c.tool[j]) {
            assert_eq!(c.logprobs[j], 0.0);
        }
    }
    // A row samples the same alone as in the batch: its answers are masked-padded, not mixed.
    let mut alone_turns = Scripted {
        every: 3,
        max_calls: 2,
        calls: vec![0; 6],
    };
    let mut req = request(prompts, 3, 24);
    req.prompts.truncate(1);
    let alone = generate_turns(model.net(), &req, None, &mut alone_turns)?;
    for r in 0..3 {
        assert_eq!(alone[r].tokens, out[r].tokens, "row {r}");
    }
    Ok(())
}

#[test]
fn without_calls_it_samples_what_generate_samples_and_an_answer_past_the_budget_cuts(
) -> anyhow::Result<()> {
    let model = model()?;
    let prompts = vec![vec![5, 9, 33, 2], vec![11, 3, 60, 7, 7]];
    let plain = generate(model.net(), &request(prompts.clone(), 2, 12), None)?;
    let mut never = Scripted {
        every: usize::MAX,
        max_calls: 0,
        calls: vec![0; 4],
    };
    let turned = generate_turns(
        model.net(),
        &request(prompts.clone(), 2, 12),
        None,
        &mut never,
    )?;
    for (a, b) in plain.iter().zip(&turned) {
        assert_eq!(a.tokens, b.tokens);
        assert!(b.tool.iter().all(|&t| !t));
    }
    // A budget of 5: a call after 3 tokens and an answer of r % 3 + 1 tokens. The single-token
    // answers of rows 0 and 3 fit (3 + 1 < 5); those of rows 1 and 2 would reach the budget:
    // those rows end there, cut, before their answers.
    let mut turns = Scripted {
        every: 3,
        max_calls: 1,
        calls: vec![0; 4],
    };
    let out = generate_turns(model.net(), &request(prompts, 2, 5), None, &mut turns)?;
    assert_eq!(out[0].tool, vec![false, false, false, true, false]);
    assert_eq!(out[3].tool, vec![false, false, false, true, false]);
    for c in &out[1..3] {
        assert_eq!(c.tokens.len(), 3);
        assert_eq!(c.finish, Finish::Length);
    }
    Ok(())
}

#[test]
fn answers_longer_than_the_cache_was_sized_for_grow_it() -> anyhow::Result<()> {
    let model = model()?;
    struct Long;
    impl Turns for Long {
        fn call_ended(
            &mut self,
            _: usize,
            tokens: &[i64],
            tool: &[bool],
        ) -> fulcrum_model::Result<bool> {
            Ok(tokens.len() == 2 && !tool[1])
        }
        fn respond(&mut self, calls: &[(usize, &[i64])]) -> fulcrum_model::Result<Vec<Vec<i64>>> {
            Ok(calls.iter().map(|_| vec![50; 30]).collect())
        }
    }
    let prompt = vec![5, 9, 33];
    let out = generate_turns(
        model.net(),
        &request(vec![prompt.clone()], 1, 40),
        None,
        &mut Long,
    )?;
    let c = &out[0];
    assert_eq!(c.tokens.len(), 40);
    let full = full_forward(&model, &prompt, &c.tokens)?;
    for j in (0..40).filter(|&j| !c.tool[j]) {
        assert!((full[j] - c.logprobs[j]).abs() < 1e-4, "token {j}");
    }
    Ok(())
}

//! Multi-turn rollouts with tools on engine servers (`task.tools` with `rollout.engine` other
//! than `native`). A draw's first turn is the usual request per group; then, in rounds, every
//! response that completed a tool call is cut right after the call, the calls of the round are
//! run together in the sandbox (the same [`ToolTurns`] the native sampler asks), each answer is
//! appended as tool tokens, and the response goes on with a continuation request of its own
//! whose prompt is the whole token-id context so far (prompt, model tokens, tool tokens), with
//! the budget that is left. The rules are the native sampler's, token for token: a stop token
//! ends a response, the budget (answers included) cuts it, a call is looked for after every
//! model token, and an answer that would reach the budget ends the response before it, cut.
//!
//! An engine samples on past a call it cannot know is one; the cut drops what it wrote after
//! the call (a prefix of a sample is a sample). In the `chat` format the call's end
//! `</tool_call>` is one token in the vocabularies that have the format (Qwen2.5, Hermes), and
//! is sent as a stop token, so the engine stops there; the `code` format's closing fence is not
//! a token of its own and is found in what comes back.
//!
//! The rounds run on the thread that drives the engines, as one job: every turn of a draw
//! samples on the same weight version. Tool tokens carry no engine log-probability (NaN), so
//! `kl/engine` and the importance weights see the model's tokens only.

use std::sync::Arc;

use fulcrum_core::rng::mix;
use fulcrum_model::turns::Turns;
use fulcrum_model::{ChatTemplate, Model, Tokenizer};
use fulcrum_rollout::{EngineCompletion, EnginePool, FinishReason, GenerateRequest};
use fulcrum_tasks::code::CodeRunner;
use fulcrum_tasks::tools::{ToolFormat, CALL_END};
use fulcrum_tasks::TaskConfig;

use super::remote::{stopped, Groups, Response};
use crate::error::TrainError;
use crate::tools::{ToolSetup, ToolStats, ToolTurns};

/// What answering tool calls needs, owned: it lives on the thread that drives the engines.
pub struct EngineTools {
    tokenizer: Tokenizer,
    chat: Option<ChatTemplate>,
    task: TaskConfig,
    runner: Arc<CodeRunner>,
    max_turns: usize,
    /// The token that ends a call, where the call format has one (`</tool_call>`).
    call_stop: Option<i64>,
}

impl EngineTools {
    /// The tools of `setup` for `model`'s responses.
    pub fn new(model: &Model, setup: &ToolSetup) -> Result<EngineTools, TrainError> {
        let tokenizer = model.tokenizer()?.clone();
        let call_stop = match setup.task.tool_format {
            ToolFormat::Chat => tokenizer.token_id(CALL_END),
            ToolFormat::Code => None,
        };
        Ok(EngineTools {
            tokenizer,
            chat: model.chat_template().ok().cloned(),
            task: setup.task.clone(),
            runner: Arc::clone(&setup.runner),
            max_turns: setup.max_turns,
            call_stop,
        })
    }
}

/// One response being drawn.
struct Row {
    /// Its group's request, and its place in the group.
    req: usize,
    sample: usize,
    c: EngineCompletion,
    tool: Vec<bool>,
    /// Where the turn not yet looked at begins in `c.tokens`.
    turn: usize,
    /// Turns sampled so far.
    turns: u64,
    /// Ended: no more turns.
    done: bool,
}

/// Draws `reqs` on `pool`, multi-turn: each response's tool calls answered in the sandbox and
/// the response continued on the engines, until it ends (see the module's text). Returns the
/// groups in request order, each response with its tool mask, and what the tools did.
pub(super) fn draw(
    pool: &mut EnginePool,
    reqs: &[GenerateRequest],
    tools: &EngineTools,
) -> Result<(Groups, ToolStats), TrainError> {
    let mut first = reqs.to_vec();
    for r in &mut first {
        r.stop_token_ids.extend(tools.call_stop);
    }
    let groups = pool.generate(&first).map_err(stopped)?;
    let mut rows: Vec<Row> = Vec::new();
    for (req, group) in groups.into_iter().enumerate() {
        for (sample, c) in group.into_iter().enumerate() {
            rows.push(Row {
                req,
                sample,
                tool: vec![false; c.tokens.len()],
                c,
                turn: 0,
                turns: 1,
                done: false,
            });
        }
    }
    let mut turns = ToolTurns::with(
        &tools.tokenizer,
        tools.chat.as_ref(),
        &tools.task,
        &tools.runner,
        tools.max_turns,
    );
    loop {
        // Each response's new turn, token by token, as the native sampler would have seen it.
        let (mut calls, mut resume) = (Vec::new(), Vec::new());
        for (i, row) in rows.iter_mut().enumerate() {
            if row.done {
                continue;
            }
            match look_for_call(row, i, &reqs[row.req], tools.call_stop, &mut turns)? {
                Turn::Call => calls.push(i),
                Turn::Resume => resume.push(i),
                Turn::End => row.done = true,
            }
        }
        if calls.is_empty() && resume.is_empty() {
            break;
        }
        let asked: Vec<(usize, &[i64])> = calls
            .iter()
            .map(|&i| (i, rows[i].c.tokens.as_slice()))
            .collect();
        let answers = if asked.is_empty() {
            Vec::new()
        } else {
            turns.respond(&asked)?
        };
        for (&i, answer) in calls.iter().zip(answers) {
            let row = &mut rows[i];
            // An answer that would fill the budget ends the response before it, cut.
            if answer.is_empty() || row.c.tokens.len() + answer.len() >= reqs[row.req].max_tokens {
                row.c.finish = FinishReason::Length;
                row.done = true;
                continue;
            }
            row.tool.extend(std::iter::repeat_n(true, answer.len()));
            row.c
                .logprobs
                .extend(std::iter::repeat_n(f32::NAN, answer.len()));
            row.c.tokens.extend(answer);
            resume.push(i);
        }
        resume.retain(|&i| !rows[i].done);
        if resume.is_empty() {
            break;
        }
        let requests: Vec<GenerateRequest> = resume
            .iter()
            .map(|&i| {
                let row = &mut rows[i];
                let req = &first[row.req];
                let mut prompt_ids = req.prompt_ids.clone();
                prompt_ids.extend_from_slice(&row.c.tokens);
                row.turn = row.c.tokens.len();
                row.turns += 1;
                GenerateRequest {
                    prompt_ids,
                    n: 1,
                    max_tokens: req.max_tokens - row.c.tokens.len(),
                    // Its own stream per response and turn, fixed by the group's seed.
                    seed: mix(mix(req.seed, row.sample as u64), row.turns),
                    ..req.clone()
                }
            })
            .collect();
        let more = pool.generate(&requests).map_err(stopped)?;
        for (&i, group) in resume.iter().zip(more) {
            let row = &mut rows[i];
            let Some(c) = group.into_iter().next() else {
                // An engine that answered a request for one completion with none: the
                // response ends where it is.
                row.done = true;
                continue;
            };
            row.tool.extend(std::iter::repeat_n(false, c.tokens.len()));
            row.c.tokens.extend(c.tokens);
            row.c.logprobs.extend(c.logprobs);
            row.c.finish = c.finish;
            row.c.weight_version = match (row.c.weight_version, c.weight_version) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            row.c.engine = c.engine;
        }
    }
    let mut out: Groups = reqs.iter().map(|_| Vec::new()).collect();
    for row in rows {
        out[row.req].push(Response {
            completion: row.c,
            tool: row.tool,
        });
    }
    Ok((out, turns.stats))
}

/// What a response's newest turn asks for.
enum Turn {
    /// It completed a call: cut after it, it waits for the answer.
    Call,
    /// The engine stopped at a call's end token that was no call to answer (past
    /// `rollout.max_turns`, or not a call): the native sampler would have sampled on.
    Resume,
    /// The response ended (a stop token, the budget, or the end the engine gave it).
    End,
}

/// Looks through `row`'s newest turn with the native sampler's checks, in its order, at every
/// token: a stop token of the model ends the response, the budget cuts it, then a call is
/// looked for. A call found cuts the turn after it; what the engine wrote after is dropped.
fn look_for_call(
    row: &mut Row,
    index: usize,
    req: &GenerateRequest,
    call_stop: Option<i64>,
    turns: &mut ToolTurns,
) -> Result<Turn, TrainError> {
    let len = row.c.tokens.len();
    // Log-probabilities the engine left out read as unknown, like llama.cpp's partial tokens.
    row.c.logprobs.resize(len, f32::NAN);
    row.tool.resize(len, false);
    for j in row.turn..len {
        let token = row.c.tokens[j];
        let last = j + 1 == len;
        if last && row.c.finish == FinishReason::Stop && req.stop_token_ids.contains(&token) {
            return Ok(Turn::End);
        }
        if j + 1 >= req.max_tokens {
            // The budget is spent here (a server that wrote past it is cut to it).
            cut(row, j + 1);
            return Ok(Turn::End);
        }
        if turns.call_ended(index, &row.c.tokens[..=j], &row.tool[..=j])? {
            cut(row, j + 1);
            return Ok(Turn::Call);
        }
        if last && row.c.finish == FinishReason::Stop && Some(token) == call_stop {
            return Ok(Turn::Resume);
        }
    }
    Ok(Turn::End)
}

/// Keeps the first `len` tokens of `row`'s response, cut there (`Length` unless it goes on).
fn cut(row: &mut Row, len: usize) {
    row.c.tokens.truncate(len);
    row.c.logprobs.truncate(len);
    row.tool.truncate(len);
    row.c.finish = FinishReason::Length;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use fulcrum_rollout::{
        EngineClient, EngineError, Http, PoolOptions, SamplingParams, WeightFiles,
    };
    use fulcrum_tasks::tools::ToolName;

    use super::*;

    /// An engine that answers from a script: the first turn of the prompt, then every
    /// continuation, and keeps the requests it was sent.
    struct Scripted {
        http: Http,
        first: Vec<(Vec<i64>, FinishReason)>,
        then: (Vec<i64>, FinishReason),
        prompt_len: usize,
        seen: Arc<Mutex<Vec<GenerateRequest>>>,
    }

    impl EngineClient for Scripted {
        fn http(&self) -> &Http {
            &self.http
        }
        fn generate(&self, req: &GenerateRequest) -> Result<Vec<EngineCompletion>, EngineError> {
            self.seen.lock().unwrap().push(req.clone());
            let script = if req.prompt_ids.len() == self.prompt_len {
                self.first.clone()
            } else {
                vec![self.then.clone(); req.n]
            };
            Ok(script
                .into_iter()
                .map(|(tokens, finish)| EngineCompletion {
                    logprobs: vec![-0.5; tokens.len()],
                    tokens,
                    finish,
                    weight_version: Some(3),
                    engine: "scripted".into(),
                })
                .collect())
        }
        fn load_weights(&self, _: &WeightFiles, _: u64) -> Result<(), EngineError> {
            Ok(())
        }
    }

    struct Case {
        model: Model,
        prompt: Vec<i64>,
        eos: i64,
    }

    impl Case {
        fn new() -> Case {
            let model = Model::tiny(tch::Device::Cpu, 0).unwrap();
            let prompt = model.tokenizer().unwrap().encode("Q: 6 * 7?\n").unwrap();
            let eos = model.stop_token_ids()[0];
            Case { model, prompt, eos }
        }

        fn enc(&self, text: &str) -> Vec<i64> {
            self.model.tokenizer().unwrap().encode(text).unwrap()
        }

        fn dec(&self, ids: &[i64]) -> String {
            self.model.tokenizer().unwrap().decode(ids, false).unwrap()
        }

        /// Draws one group of the script's size with `max_tokens` and `max_turns`.
        fn draw(
            &self,
            engine: Scripted,
            max_tokens: usize,
            max_turns: usize,
        ) -> (Groups, ToolStats, Vec<GenerateRequest>) {
            let task = TaskConfig {
                tools: vec![ToolName::Python],
                tool_format: ToolFormat::Code,
                tool_timeout_s: 5.0,
                ..TaskConfig::default()
            };
            let setup = ToolSetup::for_task(&task, max_turns).unwrap();
            let tools = EngineTools::new(&self.model, &setup).unwrap();
            let (n, seen) = (engine.first.len(), Arc::clone(&engine.seen));
            let client: Box<dyn EngineClient> = Box::new(engine);
            let mut pool = EnginePool::new(vec![client], PoolOptions::default()).unwrap();
            let req = GenerateRequest {
                prompt_ids: self.prompt.clone(),
                n,
                max_tokens,
                sampling: SamplingParams {
                    temperature: 1.0,
                    top_k: None,
                    top_p: None,
                },
                seed: 7,
                stop_token_ids: vec![self.eos],
                adapter: None,
            };
            let (groups, stats) = draw(&mut pool, &[req], &tools).unwrap();
            let seen = seen.lock().unwrap().clone();
            (groups, stats, seen)
        }

        fn engine(&self, first: Vec<(Vec<i64>, FinishReason)>, then: Vec<i64>) -> Scripted {
            Scripted {
                http: Http::new("http://scripted", Duration::from_secs(1)),
                first,
                then: (then, FinishReason::Stop),
                prompt_len: self.prompt.len(),
                seen: Arc::default(),
            }
        }
    }

    const CALL: &str = "Let me run it.\n```python\nprint(6 * 7)\n```";

    #[test]
    fn a_call_is_cut_answered_and_continued_with_the_whole_context() {
        let t = Case::new();
        // The engine writes on past the call (a made-up output): that part is dropped.
        let mut with_call = t.enc(&format!("{CALL}\n```output\n41\n```\nSo 41."));
        with_call.push(t.eos);
        let mut plain = t.enc("It is 42.");
        plain.push(t.eos);
        let mut then = t.enc("\nSo 42.");
        then.push(t.eos);
        let engine = t.engine(
            vec![
                (with_call, FinishReason::Stop),
                (plain.clone(), FinishReason::Stop),
            ],
            then.clone(),
        );
        let (groups, stats, seen) = t.draw(engine, 200, 4);
        assert_eq!(stats.calls, 1);
        assert_eq!(stats.errors, 0, "the sandbox ran the call");
        let r = &groups[0][0];
        let call = t.enc(CALL);
        let n_tool = r.tool.iter().filter(|&&x| x).count();
        assert_eq!(
            r.completion.tokens[..call.len()],
            call[..],
            "cut after the fence"
        );
        assert!(r.tool[..call.len()].iter().all(|&x| !x));
        assert!(r.tool[call.len()..call.len() + n_tool].iter().all(|&x| x));
        let answer = t.dec(&r.completion.tokens[call.len()..call.len() + n_tool]);
        assert!(answer.contains("42"), "{answer:?}");
        assert_eq!(r.completion.tokens[call.len() + n_tool..], then[..]);
        assert_eq!(r.completion.finish, FinishReason::Stop);
        // Tool tokens carry no engine log-probability; the model's do.
        for (lp, &tool) in r.completion.logprobs.iter().zip(&r.tool) {
            assert_eq!(lp.is_nan(), tool);
        }
        assert_eq!(r.completion.logprobs.len(), r.completion.tokens.len());
        // The other response is as the engine gave it.
        assert_eq!(groups[0][1].completion.tokens, plain);
        assert!(groups[0][1].tool.iter().all(|&x| !x));
        // The continuation: the prompt and the response so far, one completion, the budget
        // that is left.
        assert_eq!(seen.len(), 2);
        let cont = &seen[1];
        let mut context = t.prompt.clone();
        context.extend_from_slice(&r.completion.tokens[..call.len() + n_tool]);
        assert_eq!(cont.prompt_ids, context);
        assert_eq!((cont.n, cont.max_tokens), (1, 200 - call.len() - n_tool));
    }

    #[test]
    fn the_budget_and_the_turn_limit_end_a_response_as_the_native_sampler_does() {
        let t = Case::new();
        let call = t.enc(CALL);
        // An answer that would reach the budget ends the response after the call, cut.
        let engine = t.engine(vec![(t.enc(CALL), FinishReason::Length)], t.enc("x"));
        let (groups, stats, seen) = t.draw(engine, call.len() + 3, 4);
        let r = &groups[0][0];
        assert_eq!(r.completion.tokens, call);
        assert_eq!(r.completion.finish, FinishReason::Length);
        assert_eq!((stats.calls, seen.len()), (1, 1), "answered, not continued");

        // A call whose last token is the budget's last is no call (the budget is checked first).
        let engine = t.engine(vec![(t.enc(CALL), FinishReason::Length)], t.enc("x"));
        let (groups, stats, _) = t.draw(engine, call.len(), 4);
        assert_eq!(groups[0][0].completion.tokens, call);
        assert_eq!(stats.calls, 0);

        // With one turn, the continuation's own call is not answered.
        let mut again = t.enc(&format!("\n{CALL}"));
        again.push(t.eos);
        let engine = t.engine(vec![(t.enc(CALL), FinishReason::Length)], again.clone());
        let (groups, stats, seen) = t.draw(engine, 400, 1);
        assert_eq!((stats.calls, seen.len()), (1, 2));
        assert!(groups[0][0].completion.tokens.ends_with(&again));
        assert_eq!(groups[0][0].completion.finish, FinishReason::Stop);
    }
}

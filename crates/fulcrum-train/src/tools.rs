//! Multi-turn rollouts with tools (`task.tools`): the [`Turns`] the sampler asks after every
//! token. A row's current turn (its text since the last answer) is checked for a completed
//! call in the task's format (`fulcrum_tasks::tools`); the calls of a batch are run together in
//! the code sandbox, and each answer is rendered as the model expects it (a `tool` message of
//! its chat template, or a fenced output block) and encoded. Answers are context, not actions:
//! the sampler marks their tokens, and the step gives them no loss and no length.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_model::turns::Turns;
use fulcrum_model::{ChatTemplate, Message, Model, Tokenizer};
use fulcrum_tasks::code::CodeRunner;
use fulcrum_tasks::tools::{
    code_answer, completed_call, run_call, ToolCall, ToolFormat, ToolOutput, CALL_END,
};
use fulcrum_tasks::TaskConfig;

/// What the tools did in one sampling.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ToolStats {
    pub calls: usize,
    /// Calls answered with an error (malformed, crashed, refused, killed).
    pub errors: usize,
    pub timeouts: usize,
}

impl ToolStats {
    pub fn add(&mut self, other: ToolStats) {
        self.calls += other.calls;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
    }
}

/// A run's tools: the task's settings, the sandbox that runs the calls, the turn limit, and
/// what the calls did since the step last asked.
pub struct ToolSetup {
    pub task: TaskConfig,
    /// Shared with the thread that drives the engines, where calls are answered with engines.
    pub runner: Arc<CodeRunner>,
    pub max_turns: usize,
    pub stats: ToolStats,
}

impl ToolSetup {
    /// The tools of `task` (none when it has none), each call limited to `task.tool_timeout_s`
    /// in the sandbox this process uses (a sandbox that does not work answers every call with
    /// its refusal: code never runs unconfined).
    pub fn for_task(task: &TaskConfig, max_turns: usize) -> Option<ToolSetup> {
        if task.tools.is_empty() {
            return None;
        }
        let wall = Duration::from_secs_f64(task.tool_timeout_s);
        Some(ToolSetup {
            task: task.clone(),
            runner: Arc::new(CodeRunner::detect().with_wall(wall)),
            max_turns,
            stats: ToolStats::default(),
        })
    }

    /// The system prompt declaring the tools, in the task's call format.
    pub fn system_prompt(&self) -> String {
        fulcrum_tasks::tools::tool_instructions(self.task.tool_format)
    }
}

/// The tool side of a sampling: call detection, execution and answers.
pub struct ToolTurns<'a> {
    format: ToolFormat,
    tokenizer: &'a Tokenizer,
    chat: Option<&'a ChatTemplate>,
    runner: &'a CodeRunner,
    timeout: Duration,
    max_output: usize,
    max_turns: usize,
    /// The call each waiting row completed.
    pending: HashMap<usize, ToolCall>,
    /// Calls answered per row.
    calls: HashMap<usize, usize>,
    pub stats: ToolStats,
}

impl<'a> ToolTurns<'a> {
    /// The tools of `task` for `model`'s responses, at most `max_turns` calls a response.
    pub fn new(
        model: &'a Model,
        task: &TaskConfig,
        runner: &'a CodeRunner,
        max_turns: usize,
    ) -> fulcrum_model::Result<Self> {
        Ok(Self::with(
            model.tokenizer()?,
            model.chat_template().ok(),
            task,
            runner,
            max_turns,
        ))
    }

    /// The same from the parts of a model: its tokenizer and, where it has one, its chat
    /// template (a `chat`-format answer is rendered by it).
    pub fn with(
        tokenizer: &'a Tokenizer,
        chat: Option<&'a ChatTemplate>,
        task: &TaskConfig,
        runner: &'a CodeRunner,
        max_turns: usize,
    ) -> Self {
        ToolTurns {
            format: task.tool_format,
            tokenizer,
            chat,
            runner,
            timeout: Duration::from_secs_f64(task.tool_timeout_s),
            max_output: task.tool_max_output,
            max_turns,
            pending: HashMap::new(),
            calls: HashMap::new(),
            stats: ToolStats::default(),
        }
    }

    /// The text that answers `out`, as the model expects to read it.
    fn answer_text(&self, out: &ToolOutput) -> String {
        match (self.format, self.chat) {
            (ToolFormat::Code, _) => code_answer(out),
            (ToolFormat::Chat, Some(t)) => chat_answer(t, &out.text),
            (ToolFormat::Chat, None) => {
                format!("\n<tool_response>\n{}\n</tool_response>\n", out.text)
            }
        }
    }
}

/// A `tool` message as `template` renders it after an assistant turn that ends with a call,
/// up to the next assistant turn's start: what follows the call in the conversation.
pub fn chat_answer(template: &ChatTemplate, output: &str) -> String {
    const MARK: &str = "\u{1}fulcrum-call\u{1}";
    let messages = [
        Message::user("?"),
        Message {
            role: "assistant".into(),
            content: MARK.into(),
        },
        Message {
            role: "tool".into(),
            content: output.into(),
        },
    ];
    let text = template.render(&messages, true);
    match text.find(MARK) {
        Some(at) => text[at + MARK.len()..].to_string(),
        // A template that drops the assistant's text: the tool message alone.
        None => format!("\n<tool_response>\n{output}\n</tool_response>\n"),
    }
}

impl Turns for ToolTurns<'_> {
    fn call_ended(
        &mut self,
        row: usize,
        tokens: &[i64],
        tool: &[bool],
    ) -> fulcrum_model::Result<bool> {
        if self.calls.get(&row).copied().unwrap_or(0) >= self.max_turns {
            return Ok(false);
        }
        // Asked after every sampled token: decode the turn only when this token can end a
        // call (the `>` of `</tool_call>`, a closing backtick). A token of only whitespace
        // never does: the call it follows was seen at the token before.
        let last = match tokens.last() {
            Some(&t) => self.tokenizer.decode(&[t], false)?,
            None => return Ok(false),
        };
        if !(last.contains('>') || last.contains('`')) {
            return Ok(false);
        }
        let start = tool.iter().rposition(|&t| t).map_or(0, |i| i + 1);
        let text = self.tokenizer.decode(&tokens[start..], false)?;
        let end = text.trim_end();
        if !(end.ends_with(CALL_END) || end.ends_with("```")) {
            return Ok(false);
        }
        match completed_call(self.format, &text) {
            Some(call) => {
                self.pending.insert(row, call);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn respond(&mut self, calls: &[(usize, &[i64])]) -> fulcrum_model::Result<Vec<Vec<i64>>> {
        let todo: Vec<(usize, ToolCall)> = calls
            .iter()
            .map(|&(row, _)| {
                let call = self.pending.remove(&row).unwrap_or_else(|| {
                    ToolCall::Malformed("Error: no call was found to answer.".into())
                });
                (row, call)
            })
            .collect();
        // The calls of a batch run at once (the runner bounds how many at a time).
        let (runner, timeout, max) = (self.runner, self.timeout, self.max_output);
        let outputs: Vec<ToolOutput> = std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .iter()
                .map(|(_, call)| s.spawn(move || run_call(runner, call, timeout, max)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| ToolOutput {
                        text: "Error: the tool failed.".into(),
                        error: true,
                        timed_out: false,
                    })
                })
                .collect()
        });
        let mut answers = Vec::with_capacity(outputs.len());
        for ((row, _), out) in todo.iter().zip(&outputs) {
            *self.calls.entry(*row).or_insert(0) += 1;
            self.stats.calls += 1;
            self.stats.errors += usize::from(out.error);
            self.stats.timeouts += usize::from(out.timed_out);
            answers.push(self.tokenizer.encode(&self.answer_text(out))?);
        }
        Ok(answers)
    }
}

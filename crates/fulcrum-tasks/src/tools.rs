//! Tools a model calls in the middle of its response (`task.tools = ["python"]`): where a call
//! ends in the text the model writes, what it asks for, and the text that answers it, in the
//! two formats fulcrum reads (`task.tool_format`):
//!
//! - `chat`: the Hermes / Qwen2.5 tool-call format, `<tool_call>{"name": "python", "arguments":
//!   {"code": "..."}}</tool_call>`, the tool declared in the system prompt; the answer is a
//!   `tool` message as the model's chat template renders it (built by the trainer, which holds
//!   the template: [`ToolOutput::text`] is its content).
//! - `code`: the code-interpreter format of ToRL and SimpleTIR, a fenced python block answered
//!   by a fenced output block.
//!
//! The python tool runs each call in the code sandbox (the mode `auto` picks, its limits and
//! refusals) as a fresh interpreter: no state is kept between the calls of a response, because
//! a long-lived interpreter is a process the sandbox would have to keep contained across turns.
//! A call that is malformed, crashes or runs out of time is answered with the error's text;
//! nothing a call does fails the step.

use std::time::Duration;

use serde_json::Value;

use crate::code::CodeRunner;

fulcrum_core::closed_set! {
    /// How a model calls a tool (config `task.tool_format`).
    pub enum ToolFormat("tool format") {
        /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, answered by a `tool` message.
        Chat = "chat",
        /// A fenced python block, answered by a fenced output block.
        Code = "code",
    }
}

fulcrum_core::closed_set! {
    /// The tools a task can give its model (config `task.tools`).
    pub enum ToolName("tool") {
        /// A Python interpreter in the code sandbox.
        Python = "python",
    }
}

/// The end of a `chat` call.
pub const CALL_END: &str = "</tool_call>";
const CALL_START: &str = "<tool_call>";
/// The opening of a `code` call.
const CODE_OPEN: &str = "```python";
const FENCE: &str = "```";

/// What the system prompt says of the python tool, per format.
pub fn tool_instructions(format: ToolFormat) -> String {
    match format {
        ToolFormat::Chat => {
            let schema = serde_json::json!({
                "type": "function",
                "function": {
                    "name": "python",
                    "description": "Runs Python 3 code in a fresh interpreter and returns what \
                                    it prints (stdout, then stderr). Nothing is kept between \
                                    calls. Print the values you need.",
                    "parameters": {
                        "type": "object",
                        "properties": {"code": {"type": "string", "description": "The code to run."}},
                        "required": ["code"]
                    }
                }
            });
            format!(
                "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
                 You are provided with function signatures within <tools></tools> XML tags:\n\
                 <tools>\n{schema}\n</tools>\n\nFor each function call, return a json object \
                 with function name and arguments within <tool_call></tool_call> XML tags:\n\
                 <tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n\
                 </tool_call>\n\nUse the python tool to compute what you need, then give the \
                 final answer."
            )
        }
        ToolFormat::Code => "Solve the problem with the help of Python 3 code: write code in a \
                             ```python block and what it prints comes back in an ```output \
                             block. Nothing is kept between blocks. Give the final answer after \
                             the last block."
            .into(),
    }
}

/// A call the model has just completed.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCall {
    /// Run this code.
    Python(String),
    /// A call that cannot be run; the text says why (the model sees it as the answer).
    Malformed(String),
}

/// The call that `turn` (the model's text since the last answer) has just completed, if it
/// ends with one.
pub fn completed_call(format: ToolFormat, turn: &str) -> Option<ToolCall> {
    match format {
        ToolFormat::Chat => {
            if let Some(body_end) = turn.trim_end().strip_suffix(CALL_END) {
                let start = body_end.rfind(CALL_START)? + CALL_START.len();
                return Some(parse_chat_call(body_end[start..].trim()));
            }
            // Small models often write the same JSON in a fenced json block instead of the
            // tags: a call when it names a function and its arguments.
            let body = fenced_block(turn, "```json")?;
            let v: Value = serde_json::from_str(body.trim()).ok()?;
            (v.get("name").is_some() && v.get("arguments").is_some())
                .then(|| parse_chat_call(body.trim()))
        }
        ToolFormat::Code => {
            fenced_block(turn, CODE_OPEN).map(|code| ToolCall::Python(code.to_string()))
        }
    }
}

/// The body of the block opened by `open` (a fence with its language) that ends `turn`, closed
/// by a fence on its own line.
fn fenced_block<'a>(turn: &'a str, open: &str) -> Option<&'a str> {
    // The closing fence's token often carries the newline after it.
    let turn = turn.trim_end();
    let at = turn.rfind(open)?;
    let rest = &turn[at + open.len()..];
    let body = rest.strip_suffix(FENCE)?.strip_suffix('\n')?;
    Some(body.strip_prefix('\n').unwrap_or(body))
}

fn parse_chat_call(body: &str) -> ToolCall {
    let bad = |why: &str| {
        ToolCall::Malformed(format!(
            "Error: the tool call is not {{\"name\": \"python\", \"arguments\": {{\"code\": \
             \"...\"}}}}: {why}"
        ))
    };
    let v: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return bad(&format!("not JSON ({e})")),
    };
    match v.get("name").and_then(Value::as_str) {
        Some("python") => {}
        Some(other) => return bad(&format!("no tool named {other:?}; the only tool is python")),
        None => return bad("no \"name\""),
    }
    // Some models send the arguments as a JSON string.
    let args = match v.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).unwrap_or(Value::Null),
        Some(a) => a.clone(),
        None => Value::Null,
    };
    match args.get("code").and_then(Value::as_str) {
        Some(code) => ToolCall::Python(code.to_string()),
        None => bad("no \"arguments\".\"code\" string"),
    }
}

/// What a call gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The answer's content: what the program printed (stdout, then stderr), or the error.
    pub text: String,
    /// The call failed: malformed, refused, the program exited with an error or was killed.
    pub error: bool,
    /// The program ran past the time limit.
    pub timed_out: bool,
}

/// Runs `call` with the python tool: in `runner`'s sandbox with a wall-clock limit of
/// `timeout`, its output cut to `max_output` characters (saying so).
pub fn run_call(
    runner: &CodeRunner,
    call: &ToolCall,
    timeout: Duration,
    max_output: usize,
) -> ToolOutput {
    let code = match call {
        ToolCall::Python(code) => code,
        ToolCall::Malformed(why) => {
            return ToolOutput {
                text: why.clone(),
                error: true,
                timed_out: false,
            }
        }
    };
    let out = match runner.run_program(code, "") {
        Ok(out) => out,
        Err(why) => {
            return ToolOutput {
                text: format!("Error: the code could not be run: {why}"),
                error: true,
                timed_out: false,
            }
        }
    };
    let mut text = out.stdout.clone();
    if !out.stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&out.stderr);
    }
    if out.timed_out {
        text.push_str(&format!(
            "\nError: the code ran past the {} s time limit and was stopped.",
            timeout.as_secs_f64()
        ));
    } else if out.output_overflow {
        text.push_str("\nError: the code printed too much and was stopped.");
    }
    ToolOutput {
        text: cap_output(text.trim_end(), max_output),
        error: !out.success(),
        timed_out: out.timed_out,
    }
}

/// `text` cut to `max` characters, with a line saying how much was left out.
pub fn cap_output(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!(
        "{kept}\n[output truncated: {} of {n} characters shown]",
        max
    )
}

/// The text that answers a `code` call: the output in a fenced block.
pub fn code_answer(output: &ToolOutput) -> String {
    format!("\n```output\n{}\n```\n", output.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_calls_are_found_at_the_end_of_the_turn_and_parsed() {
        let turn = "Let me compute.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(2+2)\"}}\n</tool_call>";
        assert_eq!(
            completed_call(ToolFormat::Chat, turn),
            Some(ToolCall::Python("print(2+2)".into()))
        );
        // Not yet closed; closed earlier and text after it: no call ends here.
        assert_eq!(
            completed_call(ToolFormat::Chat, &turn[..turn.len() - 3]),
            None
        );
        assert_eq!(
            completed_call(ToolFormat::Chat, &format!("{turn} so")),
            None
        );
        // The same JSON in a fenced json block, as small models write it.
        let fenced =
            "```json\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(3)\"}}\n```";
        assert_eq!(
            completed_call(ToolFormat::Chat, fenced),
            Some(ToolCall::Python("print(3)".into()))
        );
        assert_eq!(
            completed_call(ToolFormat::Chat, "```json\n{\"a\": 1}\n```"),
            None
        );
        // Arguments as a string, a wrong name, broken JSON: the model is told.
        let as_string = "<tool_call>{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}</tool_call>";
        assert_eq!(
            completed_call(ToolFormat::Chat, as_string),
            Some(ToolCall::Python("print(1)".into()))
        );
        for bad in [
            "<tool_call>{\"name\": \"shell\", \"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"python\"</tool_call>",
            "<tool_call>{\"name\": \"python\", \"arguments\": {\"cmd\": 1}}</tool_call>",
        ] {
            assert!(
                matches!(
                    completed_call(ToolFormat::Chat, bad),
                    Some(ToolCall::Malformed(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn code_calls_end_with_the_closing_fence() {
        let turn = "We need 17*23.\n```python\nprint(17*23)\n```";
        assert_eq!(
            completed_call(ToolFormat::Code, turn),
            Some(ToolCall::Python("print(17*23)".into()))
        );
        assert_eq!(
            completed_call(ToolFormat::Code, "```python\nprint(1)\n``"),
            None
        );
        // The closing fence with its newline (one token in many vocabularies) ends the call.
        assert_eq!(
            completed_call(ToolFormat::Code, "```python\nprint(2)\n```\n"),
            Some(ToolCall::Python("print(2)".into()))
        );
        assert_eq!(completed_call(ToolFormat::Code, "no code here ```"), None);
        // An empty block is a call too (it prints nothing).
        assert_eq!(
            completed_call(ToolFormat::Code, "```python\n```"),
            Some(ToolCall::Python(String::new()))
        );
    }

    #[test]
    fn long_output_is_cut_and_says_so() {
        assert_eq!(cap_output("abc", 5), "abc");
        let cut = cap_output(&"x".repeat(10), 4);
        assert!(
            cut.starts_with("xxxx\n[output truncated: 4 of 10 characters"),
            "{cut}"
        );
        let ans = code_answer(&ToolOutput {
            text: "391".into(),
            error: false,
            timed_out: false,
        });
        assert_eq!(ans, "\n```output\n391\n```\n");
    }
}

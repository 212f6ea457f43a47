//! The python tool in the code sandbox: output, a crash, a timeout, a flood and a hostile
//! program each come back as the call's answer; none is an error of the caller.

use std::time::Duration;

use fulcrum_tasks::code::CodeRunner;
use fulcrum_tasks::tools::{run_call, ToolCall};

fn runner() -> Option<CodeRunner> {
    match CodeRunner::try_detect() {
        Ok(r) => Some(r.with_wall(Duration::from_secs(2))),
        Err(e) => {
            // Without a sandbox the tool refuses to run code (tested below), never runs it bare.
            eprintln!("no sandbox here ({e}): only the refusal is tested");
            None
        }
    }
}

fn call(code: &str) -> ToolCall {
    ToolCall::Python(code.into())
}

#[test]
fn calls_answer_with_their_output_or_their_error() {
    let Some(r) = runner() else {
        let refusing = CodeRunner::detect();
        let out = run_call(&refusing, &call("print(1)"), Duration::from_secs(2), 100);
        assert!(
            out.error && out.text.contains("could not be run"),
            "{out:?}"
        );
        return;
    };
    let t = Duration::from_secs(2);
    let ok = run_call(&r, &call("print(17 * 23)"), t, 100);
    assert_eq!(
        (ok.text.as_str(), ok.error, ok.timed_out),
        ("391", false, false)
    );
    let crash = run_call(&r, &call("1 / 0"), t, 2000);
    assert!(
        crash.error && crash.text.contains("ZeroDivisionError"),
        "{crash:?}"
    );
    let slow = run_call(&r, &call("while True: pass"), t, 2000);
    assert!(slow.error && slow.timed_out, "{slow:?}");
    assert!(slow.text.contains("time limit"), "{slow:?}");
    let flood = run_call(&r, &call("print('x' * 100000)"), t, 50);
    assert!(flood.text.contains("[output truncated: 50 of"), "{flood:?}");
    // Contained: the program cannot reach the network or write outside its scratch space.
    let hostile = run_call(
        &r,
        &call("import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=1)\nprint('reached')"),
        t,
        2000,
    );
    assert!(
        hostile.error && !hostile.text.contains("reached"),
        "{hostile:?}"
    );
    let malformed = run_call(&r, &ToolCall::Malformed("Error: bad call".into()), t, 100);
    assert_eq!(
        (malformed.text.as_str(), malformed.error),
        ("Error: bad call", true)
    );
}

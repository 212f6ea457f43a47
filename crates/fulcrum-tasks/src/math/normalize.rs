//! Normalising an answer string, following lm-eval's and verl's MATH rules.
//!
//! Removes what does not change the value: `$`, `\left`/`\right`, spacing commands, `^\circ`,
//! `\%`, a trailing `.`, units written as `\text{ cm}` at the end, `\text{}`/`\mathrm{}` wrappers,
//! `\displaystyle`; rewrites `\dfrac`/`\tfrac` to `\frac`, `\frac12` to `\frac{1}{2}`,
//! `\sqrt2` to `\sqrt{2}`, `.5` to `0.5`, thousands separators (`1,000`) to plain digits, and a
//! leading `x =` (a short variable name) away; finally removes all spaces. Every rule is a single
//! pass over the string, so normalising is linear in its length.

/// Commands that wrap text and are unwrapped (`\text{(C)}` to `(C)`).
const WRAPPERS: [&str; 7] = [
    "\\text",
    "\\textbf",
    "\\textit",
    "\\mathrm",
    "\\mathbf",
    "\\mbox",
    "\\operatorname",
];

/// Removes `cmd{...}` wrappers, keeping their content.
fn unwrap_command(s: &str, cmd: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(cmd) {
        let after = &rest[at + cmd.len()..];
        // `\text` must not match `\textbf`: the next char has to be `{` (or a space then `{`).
        let trimmed = after.trim_start();
        if !trimmed.starts_with('{') {
            out.push_str(&rest[..at + cmd.len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        let body = &trimmed[1..];
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            Some(i) => {
                out.push_str(&body[..i]);
                rest = &body[i + 1..];
            }
            None => {
                out.push_str(body);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// `\frac12` to `\frac{1}{2}`, `\frac1{2}` to `\frac{1}{2}` (lm-eval's `fix_fracs`).
fn fix_fracs(s: &str) -> String {
    let mut parts = s.split("\\frac");
    let mut out = parts.next().unwrap_or("").to_string();
    for part in parts {
        out.push_str("\\frac");
        let mut chars = part.chars();
        match (chars.next(), chars.clone().next()) {
            (Some('{'), _) | (None, _) => out.push_str(part),
            (Some(a), Some(b)) if b != '{' => {
                let rest: String = chars.skip(1).collect();
                out.push_str(&format!("{{{a}}}{{{b}}}{rest}"));
            }
            (Some(a), _) => {
                let rest: String = chars.collect();
                out.push_str(&format!("{{{a}}}{rest}"));
            }
        }
    }
    out
}

/// `\sqrt2` to `\sqrt{2}` (lm-eval's `fix_sqrt`).
fn fix_sqrt(s: &str) -> String {
    let mut parts = s.split("\\sqrt");
    let mut out = parts.next().unwrap_or("").to_string();
    for part in parts {
        out.push_str("\\sqrt");
        match part.chars().next() {
            Some(c) if c != '{' && c != '[' && c.is_ascii_alphanumeric() => {
                out.push_str(&format!("{{{c}}}{}", &part[c.len_utf8()..]));
            }
            _ => out.push_str(part),
        }
    }
    out
}

/// True for `1,000`, `-12,345,678.5`: commas are thousands separators.
fn is_thousands(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    let int = body.split('.').next().unwrap_or("");
    let groups: Vec<&str> = int.split(',').collect();
    groups.len() > 1
        && !groups[0].is_empty()
        && groups[0].len() <= 3
        && groups[0].bytes().all(|b| b.is_ascii_digit())
        && groups[1..]
            .iter()
            .all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()))
        && body
            .split('.')
            .nth(1)
            .is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit()))
}

/// Drops `x =` when the left side is a short variable name (`x`, `k`, `a_1`, `y(0)` is kept).
fn strip_variable_lhs(s: &str) -> &str {
    if let Some((lhs, rhs)) = s.split_once('=') {
        let lhs = lhs.trim();
        let short = !lhs.is_empty()
            && lhs.chars().count() <= 3
            && lhs
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '\\')
            && lhs
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '\\');
        let greek = lhs.starts_with('\\') && lhs[1..].chars().all(|c| c.is_ascii_alphabetic());
        if (short || greek) && !rhs.contains('=') {
            return rhs.trim();
        }
    }
    s
}

/// Normalises an answer string (see the module docs for the rules).
pub fn normalize(answer: &str) -> String {
    // `\\` (a LaTeX row break) is kept whole: protect it from the one-backslash rules below.
    let mut s = answer.trim().replace('\n', " ").replace("\\\\", ROW_BREAK);
    for (from, to) in [
        ("\\!", ""),
        ("\\,", " "),
        ("\\;", " "),
        ("\\:", " "),
        ("\\ ", " "),
        ("\\displaystyle", ""),
        ("\\left", ""),
        ("\\right", ""),
        ("\\bigl", ""),
        ("\\bigr", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\circ", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\%", ""),
        ("%", ""),
        ("\\{", "{"),
        ("\\}", "}"),
        ("\\le ", "\\leq "),
    ] {
        if s.contains(from) {
            s = s.replace(from, to);
        }
    }
    // Units: everything from a `\text{ ` (text starting with a space) onwards goes, as in lm-eval.
    for unit_start in ["\\text{ ", "\\mbox{ "] {
        if let Some(at) = s.find(unit_start) {
            if at > 0 {
                s.truncate(at);
            }
        }
    }
    for w in WRAPPERS {
        if s.contains(w) {
            s = unwrap_command(&s, w);
        }
    }
    let mut s = s.trim().trim_end_matches('.').trim().to_string();
    while s.contains("\\frac ") {
        s = s.replace("\\frac ", "\\frac");
    }
    if s.contains("\\frac") {
        s = fix_fracs(&s);
    }
    if s.contains("\\sqrt") {
        s = fix_sqrt(&s);
    }
    s = strip_variable_lhs(&s).to_string();
    // Thousands separators only when written without spaces (`1,000`; `1 , 000` is a list).
    if is_thousands(&s) {
        s.retain(|c| c != ',');
    }
    s = remove_spaces(&s).replace(ROW_BREAK, "\\\\");
    if s.starts_with('.') {
        s.insert(0, '0');
    }
    if s.contains("{.") {
        s = s.replace("{.", "{0.");
    }
    // Outer braces around everything: `{{5}}` to `5`.
    let layers = outer_brace_layers(&s);
    if layers > 0 {
        s = s[layers..s.len() - layers].to_string();
    }
    s
}

/// Stands in for `\\` while the single-backslash rules run.
const ROW_BREAK: &str = "\u{1}";

/// Removes whitespace, except one space between a command and a following letter
/// (`\omega i` must not become `\omegai`).
fn remove_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_command = false;
    let mut pending_space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && in_command && c.is_ascii_alphabetic() {
            out.push(' ');
        }
        pending_space = false;
        if c == '\\' {
            in_command = true;
        } else if !c.is_ascii_alphabetic() {
            in_command = false;
        }
        out.push(c);
    }
    out
}

/// How many `{` at the start close exactly at the matching places at the end (one pass).
fn outer_brace_layers(s: &str) -> usize {
    let b = s.as_bytes();
    let lead = b.iter().take_while(|&&c| c == b'{').count();
    if lead == 0 {
        return 0;
    }
    // For each leading brace (depth d = 1..=lead), find where it closes.
    let mut depth = 0usize;
    let mut layers = lead;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                if depth == 0 {
                    return 0;
                }
                if depth <= lead {
                    // The brace opened at position depth-1 closes here: it wraps everything
                    // only if it closes at position len - depth.
                    if b.len().checked_sub(depth) != Some(i) {
                        layers = layers.min(depth - 1);
                    }
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    if depth != 0 {
        return 0;
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn math_rules_remove_decoration() {
        assert_eq!(normalize("$\\dfrac{1}{2}$"), "\\frac{1}{2}");
        assert_eq!(normalize("336^\\circ"), "336");
        assert_eq!(normalize("10 \\text{ cm}"), "10");
        assert_eq!(normalize("\\text{(C)}"), "(C)");
        assert_eq!(
            normalize("\\left( 3, \\frac{\\pi}{2} \\right)"),
            "(3,\\frac{\\pi}{2})"
        );
        assert_eq!(normalize("1,000,000."), "1000000");
        assert_eq!(normalize("x = 3"), "3");
        assert_eq!(normalize("\\frac12"), "\\frac{1}{2}");
        assert_eq!(normalize("\\sqrt2"), "\\sqrt{2}");
        assert_eq!(normalize(".5"), "0.5");
        assert_eq!(normalize("50\\%"), "50");
        assert_eq!(normalize("{5}"), "5");
        assert_eq!(normalize("{{5}}"), "5");
        assert_eq!(normalize("{{1}{2}}"), "{1}{2}");
    }

    #[test]
    fn lists_and_equations_are_not_mangled() {
        assert_eq!(normalize("1,3,5"), "1,3,5");
        assert_eq!(normalize("1,23"), "1,23");
        assert_eq!(normalize("y=2x+1"), "2x+1");
        assert_eq!(normalize("m v' + b v = f"), "mv'+bv=f");
        assert_eq!(normalize("{1}{2}"), "{1}{2}");
    }
}

//! Finding the final answer in a model response.
//!
//! In order of preference: the last `Answer:` line in the tail of the response (DAPO / verl
//! math_dapo style), the last `\boxed{...}` or `\fbox{...}` (nested braces matched), GSM8K's
//! `#### N`, and, unless switched off, the last number in the response. Every search is linear in
//! the length of the response, and the `Answer:` search only looks at the last
//! [`ANSWER_TAIL_BYTES`] bytes, as verl does, so a long response cannot make extraction slow.

/// How far from the end the `Answer:` line is searched for.
pub const ANSWER_TAIL_BYTES: usize = 1000;

/// Where an extracted answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The last `Answer:` line.
    AnswerLine,
    /// The last `\boxed{}` / `\fbox{}`.
    Boxed,
    /// GSM8K's `#### N`.
    Hashes,
    /// The last number in the response.
    LastNumber,
}

impl Source {
    /// A short name for reasons.
    pub fn name(self) -> &'static str {
        match self {
            Source::AnswerLine => "Answer: line",
            Source::Boxed => "\\boxed{}",
            Source::Hashes => "####",
            Source::LastNumber => "last number",
        }
    }
}

/// The largest char boundary at or below `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The content of the last `\boxed{...}` or `\fbox{...}` (or `\boxed N`), if any.
///
/// One backward pass over the bytes to find the command, one forward pass to match braces
/// (braces are ASCII, so byte positions are char boundaries).
pub fn last_boxed(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let mut i = b.len();
    let (start, name_len) = loop {
        i = b[..i].iter().rposition(|&c| c == b'\\')?;
        if b[i + 1..].starts_with(b"boxed") {
            break (i, 6);
        }
        if b[i + 1..].starts_with(b"fbox") {
            break (i, 5);
        }
    };
    let rest = &s[start + name_len..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut depth = 1usize;
        for (i, &c) in body.as_bytes().iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(&body[..i]);
                    }
                }
                _ => {}
            }
        }
        None
    } else if let Some(body) = rest.strip_prefix(' ') {
        let end = body.find(['$', '\n']).unwrap_or(body.len());
        Some(body[..end].trim())
    } else {
        None
    }
}

/// The rest of the line after the last `Answer:` in the tail of `s`.
pub fn answer_line(s: &str) -> Option<&str> {
    let tail = &s[floor_boundary(s, s.len().saturating_sub(ANSWER_TAIL_BYTES))..];
    let at = tail.rfind("Answer:").or_else(|| tail.rfind("answer:"))?;
    let line = tail[at + 7..].lines().next().unwrap_or("").trim();
    (!line.is_empty()).then_some(line)
}

/// The rest of the line after the last `####`.
pub fn hashes(s: &str) -> Option<&str> {
    let at = s.rfind("####")?;
    let line = s[at + 4..].lines().next().unwrap_or("").trim();
    (!line.is_empty()).then_some(line)
}

/// Longest number the last-number fallback reads (longer ones are cut to their last digits).
pub const MAX_NUMBER_BYTES: usize = 1000;

/// The last number (`-12`, `3.5`, `1,000`) in `s`, scanning back from the end.
pub fn last_number(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let mut end = b.len();
    while end > 0 && !b[end - 1].is_ascii_digit() {
        end -= 1;
    }
    if end == 0 {
        return None;
    }
    let mut start = end;
    while start > 0 && end - start < MAX_NUMBER_BYTES {
        let c = b[start - 1];
        let inner = start - 1 > 0 && b[start - 2].is_ascii_digit() && start < end;
        if c.is_ascii_digit() || ((c == b'.' || c == b',') && inner) {
            start -= 1;
        } else {
            break;
        }
    }
    if start > 0 && b[start - 1] == b'-' {
        start -= 1;
    }
    Some(&s[start..end])
}

/// Finds the final answer of a response, with where it came from.
pub fn extract(response: &str, fallback_last_number: bool) -> Option<(&str, Source)> {
    if let Some(line) = answer_line(response) {
        let line = last_boxed(line).unwrap_or(line);
        return Some((line, Source::AnswerLine));
    }
    if let Some(b) = last_boxed(response) {
        return Some((b, Source::Boxed));
    }
    if let Some(h) = hashes(response) {
        return Some((h, Source::Hashes));
    }
    if fallback_last_number {
        return last_number(response).map(|n| (n, Source::LastNumber));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxed_with_nested_braces_is_found_whole() {
        assert_eq!(
            last_boxed("x \\boxed{1} y \\boxed{\\frac{1}{2}} z"),
            Some("\\frac{1}{2}")
        );
        assert_eq!(last_boxed("\\fbox{7}"), Some("7"));
        assert_eq!(last_boxed("so $\\boxed 5$."), Some("5"));
        assert_eq!(last_boxed("\\boxed{unclosed"), None);
    }

    #[test]
    fn answer_line_wins_and_is_unboxed() {
        let r = "we get \\boxed{4}\nAnswer: \\boxed{5}";
        assert_eq!(extract(r, true), Some(("5", Source::AnswerLine)));
        assert_eq!(
            extract("ok\n#### 1,200\n", true),
            Some(("1,200", Source::Hashes))
        );
    }

    #[test]
    fn last_number_fallback_can_be_switched_off() {
        assert_eq!(
            extract("it is -3.5 or 12,000.", true),
            Some(("12,000", Source::LastNumber))
        );
        assert_eq!(
            extract("it is -3.5", true),
            Some(("-3.5", Source::LastNumber))
        );
        assert_eq!(extract("it is 12", false), None);
    }

    #[test]
    fn answer_far_before_the_tail_is_ignored() {
        let r = format!("Answer: 3\n{}", "x".repeat(2 * ANSWER_TAIL_BYTES));
        assert_eq!(answer_line(&r), None);
    }
}

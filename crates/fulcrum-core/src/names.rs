//! Spelling of closed sets (rules, estimators, BA count): one list per enum, parsed with an
//! error that lists every valid name and suggests the nearest one.

use crate::CoreError;

/// Parses `got` against `(name, value)` pairs, or says which names are valid.
pub(crate) fn parse_name<T: Copy>(
    kind: &'static str,
    got: &str,
    table: &[(&'static str, T)],
) -> Result<T, CoreError> {
    if let Some((_, v)) = table.iter().find(|(n, _)| *n == got) {
        return Ok(*v);
    }
    let nearest = table
        .iter()
        .map(|(n, _)| (edit_distance(&got.to_ascii_lowercase(), n), *n))
        .min();
    let suggestion = match nearest {
        Some((d, n)) if d <= 2.max(got.len() / 3) => Some(n.to_string()),
        _ => None,
    };
    Err(CoreError::UnknownName {
        kind,
        got: got.to_string(),
        valid: table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        suggestion,
    })
}

/// Levenshtein distance over chars; names are short, so the quadratic table is fine.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_name_lists_valid_names_and_nearest() {
        let table = [("ba", 0), ("ba-batch", 1), ("token", 2)];
        let err = parse_name("rule", "ba_batch", &table).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("unknown rule \"ba_batch\""), "{text}");
        assert!(text.contains("valid rules: ba, ba-batch, token"), "{text}");
        assert!(text.contains("did you mean ba-batch?"), "{text}");
        assert_eq!(parse_name("rule", "token", &table), Ok(2));
    }

    #[test]
    fn far_names_get_no_suggestion() {
        let table = [("ba", 0), ("token", 2)];
        let err = parse_name("rule", "completely-different", &table).unwrap_err();
        assert!(!err.to_string().contains("did you mean"));
    }
}

//! The documentation against the code.
//!
//! - `every_config_key_is_documented_with_its_default`: `docs/configuration.md` has one row per
//!   config key, `| `dotted.key` | `default` | meaning |` (or `unset` for a key that has no
//!   value by default), and every default is the code's.
//! - `every_relative_link_in_the_docs_resolves`: every relative link and image of README.md,
//!   docs/**/*.md and python/README.md names a file or directory that exists, and every
//!   `#anchor` into a markdown file names one of its headings.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use fulcrum_train::Config;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ---------------------------------------------------------------------------------------------
// The keys of the code
// ---------------------------------------------------------------------------------------------

/// What the code says about one dotted key.
#[derive(Debug, Clone, PartialEq)]
enum CodeDefault {
    /// The value `Config::default().to_toml()` (what `fulcrum train --print-config` prints) has.
    Printed(toml::Value),
    /// `None` by default (an `Option` field, or a key inside an optional table that is `None`).
    Unset,
    /// A plain field that the config leaves out of its TOML at its default
    /// (`skip_serializing_if`): its default is checked by loading the documented value.
    NotPrinted,
}

/// One field found by walking `Config`'s `Deserialize` implementation.
#[derive(Debug, Clone, Default)]
struct Probed {
    /// The field is an `Option`.
    optional: bool,
    /// The field is a table (a struct) with these fields; `None`: a value.
    fields: Option<Vec<&'static str>>,
}

#[derive(Debug)]
struct ProbeError(String);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProbeError(msg.to_string())
    }
}

/// A deserializer that walks down `path` (one key per struct) and records what it finds at
/// the end: whether the field there is an `Option`, and the field names if it is a struct.
/// Deserializing fails on purpose once the end is reached (it has no values to give); what
/// was recorded before is the answer. This finds every field, including those a
/// serialisation leaves out (`skip_serializing_if`), which `to_toml` and `serde_json` cannot.
struct Probe {
    path: Rc<Vec<String>>,
    depth: usize,
    out: Rc<RefCell<Probed>>,
}

impl Probe {
    fn at_end(&self) -> bool {
        self.depth == self.path.len()
    }
}

impl<'de> Deserializer<'de> for Probe {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        if self.at_end() {
            Err(ProbeError("a value".into()))
        } else {
            Err(ProbeError(format!(
                "`{}` is not a table",
                self.path[..self.depth].join(".")
            )))
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        if self.at_end() {
            self.out.borrow_mut().optional = true;
        }
        visitor.visit_some(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        if self.at_end() {
            self.out.borrow_mut().fields = Some(fields.to_vec());
            // Stop here: a struct with defaults would accept an empty table, one without would
            // not, and either way the fields are known.
            return Err(ProbeError("a table".into()));
        }
        visitor.visit_map(OneKey {
            probe: Some(Probe {
                path: self.path.clone(),
                depth: self.depth + 1,
                out: self.out.clone(),
            }),
            key: Some(self.path[self.depth].clone()),
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// A table with one key, whose value is the probe one level down.
struct OneKey {
    key: Option<String>,
    probe: Option<Probe>,
}

impl<'de> MapAccess<'de> for OneKey {
    type Error = ProbeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ProbeError> {
        match self.key.take() {
            Some(k) => seed
                .deserialize(de::value::StringDeserializer::<ProbeError>::new(k))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ProbeError> {
        seed.deserialize(self.probe.take().expect("one value per key"))
    }
}

fn probe(path: &[String]) -> Probed {
    let out = Rc::new(RefCell::new(Probed::default()));
    let _ = Config::deserialize(Probe {
        path: Rc::new(path.to_vec()),
        depth: 0,
        out: out.clone(),
    });
    let found = out.borrow().clone();
    found
}

/// Every key of `Config`: `(dotted key, optional)`, where `optional` says the key or a table
/// above it is an `Option`. Tables that are not optional (`[model]`) are not keys themselves;
/// optional ones (`model.lora`) are, and so are their fields.
fn config_keys() -> BTreeMap<String, bool> {
    fn walk(path: &mut Vec<String>, under_option: bool, keys: &mut BTreeMap<String, bool>) {
        let here = probe(path);
        let optional = under_option || here.optional;
        match here.fields {
            Some(fields) => {
                if here.optional && !path.is_empty() {
                    keys.insert(path.join("."), optional);
                }
                for f in fields {
                    path.push(f.to_string());
                    walk(path, optional, keys);
                    path.pop();
                }
            }
            None => {
                keys.insert(path.join("."), optional);
            }
        }
    }
    let mut keys = BTreeMap::new();
    walk(&mut Vec::new(), false, &mut keys);
    // The policy loss's settings are `[ppo]` keys read apart from the rest of the table
    // (`Config::from_table`): they are `fulcrum_core::LossParams`'s fields.
    let loss = toml::Table::try_from(fulcrum_core::LossParams::default())
        .expect("LossParams is a TOML table");
    for k in loss.keys() {
        keys.insert(format!("ppo.{k}"), false);
    }
    assert!(
        keys.contains_key("steps") && keys.contains_key("ppo.eps_high"),
        "the probe of Config found no fields: {keys:?}"
    );
    keys
}

/// A TOML table flattened to dotted keys: tables recurse, anything else (arrays too) is a value.
fn flatten_toml(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten_toml(&key, t, out),
            other => {
                out.insert(key, other.clone());
            }
        }
    }
}

/// The JSON value at a dotted key, `None` when a table on the way does not have it.
fn json_at<'a>(value: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    key.split('.').try_fold(value, |v, part| v.get(part))
}

/// Every key of the code with its default.
fn code_defaults() -> BTreeMap<String, CodeDefault> {
    let default = Config::default();
    let printed: toml::Table = default
        .to_toml()
        .parse()
        .expect("Config::default().to_toml() is TOML");
    let mut values = BTreeMap::new();
    flatten_toml("", &printed, &mut values);
    let json = serde_json::to_value(&default).expect("Config serialises to JSON");

    let mut out = BTreeMap::new();
    for (key, optional) in config_keys() {
        let d = if let Some(v) = values.get(&key) {
            CodeDefault::Printed(v.clone())
        } else if optional {
            // An `Option` (or a key of an optional table) that is not printed: `None`, which
            // the JSON shows as null or (with `skip_serializing_if`) leaves out.
            let j = json_at(&json, &key);
            assert!(
                j.is_none_or(|v| v.is_null()),
                "`{key}` is optional and not printed by to_toml, but its JSON is {j:?}"
            );
            CodeDefault::Unset
        } else {
            CodeDefault::NotPrinted
        };
        out.insert(key, d);
    }
    // Anything printed must be a key the probe found.
    for key in values.keys() {
        assert!(
            out.contains_key(key),
            "to_toml prints `{key}`, which the probe of Config did not find"
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The keys of docs/configuration.md
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum DocDefault {
    Value(String),
    Unset,
}

impl fmt::Display for DocDefault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DocDefault::Value(v) => write!(f, "`{v}`"),
            DocDefault::Unset => f.write_str("unset"),
        }
    }
}

struct DocRow {
    line: usize,
    heading: String,
    default: DocDefault,
}

const TABLE_HEADER: &str = "| key | default | meaning |";

/// The rows of every `| key | default | meaning |` table: `| `key` | `default` | ... |` or
/// `| `key` | unset | ... |`. Malformed rows and repeated keys are errors.
fn doc_rows(text: &str, errors: &mut Vec<String>) -> BTreeMap<String, DocRow> {
    let mut rows: BTreeMap<String, DocRow> = BTreeMap::new();
    let mut heading = String::new();
    let mut in_table = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix("## ") {
            heading = h.trim().to_string();
        }
        if trimmed == TABLE_HEADER {
            in_table = true;
            continue;
        }
        if !trimmed.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || trimmed.starts_with("|---") || trimmed.starts_with("| ---") {
            continue;
        }
        match parse_row(trimmed) {
            Some((key, default)) => {
                if let Some(first) = rows.get(&key) {
                    errors.push(format!(
                        "docs/configuration.md:{n}: `{key}` is documented twice (first on line {})",
                        first.line
                    ));
                    continue;
                }
                rows.insert(
                    key,
                    DocRow {
                        line: n,
                        heading: heading.clone(),
                        default,
                    },
                );
            }
            None => errors.push(format!(
                "docs/configuration.md:{n}: not a row of the form | `dotted.key` | `default` (or unset) | meaning |: {trimmed}"
            )),
        }
    }
    rows
}

fn parse_row(line: &str) -> Option<(String, DocDefault)> {
    let rest = line.strip_prefix("| `")?;
    let (key, rest) = rest.split_once('`')?;
    let rest = rest.strip_prefix(" | ")?;
    let (default, rest) = if let Some(r) = rest.strip_prefix("unset") {
        (DocDefault::Unset, r)
    } else {
        let r = rest.strip_prefix('`')?;
        let (v, r) = r.split_once('`')?;
        (DocDefault::Value(v.to_string()), r)
    };
    let meaning = rest.strip_prefix(" | ")?;
    if !meaning.ends_with('|') || meaning.trim_end_matches('|').trim().is_empty() {
        return None;
    }
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    Some((key.to_string(), default))
}

/// The heading a key's table must have: `Top level`, or `[section]` for `section.key`.
fn expected_heading(key: &str) -> String {
    match key.rsplit_once('.') {
        None => "Top level".into(),
        Some((section, _)) => format!("[{section}]"),
    }
}

fn parse_toml_value(text: &str) -> Result<toml::Value, String> {
    let mut t: toml::Table = format!("v = {text}")
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    Ok(t.remove("v").expect("the one key"))
}

/// The documented value loaded over the printed defaults: the config is unchanged when it is
/// the default. (Over the whole printed config, not alone: a table given with only some of its
/// keys takes its struct's own defaults for the rest.)
fn loads_as_default(key: &str, value: &toml::Value) -> Result<bool, String> {
    let mut table: toml::Table = Config::default()
        .to_toml()
        .parse()
        .map_err(|e: toml::de::Error| e.to_string())?;
    let parts: Vec<&str> = key.split('.').collect();
    let mut node = &mut table;
    for p in &parts[..parts.len() - 1] {
        node = node
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("a table");
    }
    node.insert(parts[parts.len() - 1].to_string(), value.clone());
    let loaded = Config::from_table(table, "docs/configuration.md").map_err(|e| e.to_string())?;
    Ok(loaded == Config::default())
}

#[test]
fn every_config_key_is_documented_with_its_default() {
    let code = code_defaults();
    let path = repo_root().join("docs/configuration.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut errors = Vec::new();
    let doc = doc_rows(&text, &mut errors);

    for (key, default) in &code {
        let Some(row) = doc.get(key) else {
            let shown = match default {
                CodeDefault::Printed(v) => format!("`{v}`"),
                CodeDefault::Unset => "unset".into(),
                CodeDefault::NotPrinted => "(not printed at its default)".into(),
            };
            errors.push(format!(
                "missing: `{key}` (default {shown}) has no row in docs/configuration.md"
            ));
            continue;
        };
        let at = format!("docs/configuration.md:{}", row.line);
        let want_heading = expected_heading(key);
        if !row.heading.starts_with(&want_heading) {
            errors.push(format!(
                "{at}: `{key}` is under \"## {}\"; it belongs under \"## {want_heading}\"",
                row.heading
            ));
        }
        match (default, &row.default) {
            (CodeDefault::Unset, DocDefault::Unset) => {}
            (CodeDefault::Unset, DocDefault::Value(v)) => errors.push(format!(
                "{at}: `{key}`: the doc says `{v}`, the code's default is unset"
            )),
            (CodeDefault::Printed(v), DocDefault::Unset) => errors.push(format!(
                "{at}: `{key}`: the doc says unset, the code's default is `{v}`"
            )),
            (CodeDefault::NotPrinted, DocDefault::Unset) => errors.push(format!(
                "{at}: `{key}`: the doc says unset, but the key is not an Option: it has a default (not printed by --print-config)"
            )),
            (CodeDefault::Printed(want), DocDefault::Value(got)) => match parse_toml_value(got) {
                Ok(g) if &g == want => {}
                Ok(_) => errors.push(format!(
                    "{at}: `{key}`: the doc says `{got}`, the code's default is `{want}`"
                )),
                Err(e) => errors.push(format!(
                    "{at}: `{key}`: the doc's default `{got}` is not a TOML value ({e}); the code's default is `{want}`"
                )),
            },
            (CodeDefault::NotPrinted, DocDefault::Value(got)) => {
                match parse_toml_value(got).and_then(|g| loads_as_default(key, &g)) {
                    Ok(true) => {}
                    Ok(false) => errors.push(format!(
                        "{at}: `{key}`: the doc says `{got}`, but loading `{key} = {got}` changes the config: it is not the code's default (which --print-config does not print)"
                    )),
                    Err(e) => errors.push(format!(
                        "{at}: `{key}`: the doc's default `{got}` does not load ({e})"
                    )),
                }
            }
        }
    }
    for (key, row) in &doc {
        if !code.contains_key(key) {
            errors.push(format!(
                "docs/configuration.md:{}: `{key}` (documented default {}) is not a key of the code's Config",
                row.line, row.default
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "docs/configuration.md and the code disagree ({} problems):\n  {}",
        errors.len(),
        errors.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------------

/// The markdown files whose links are checked: README.md, docs/**/*.md, python/README.md.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let root = repo_root();
    let mut files = vec![root.join("README.md"), root.join("python/README.md")];
    walk(&root.join("docs"), &mut files);
    files
}

/// The lines of a markdown file outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = t.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = marker {
            let run = t.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => {
                        fence = Some((c, run));
                        continue;
                    }
                    Some((fc, fr)) if fc == c && run >= fr && t[run..].trim().is_empty() => {
                        fence = None;
                        continue;
                    }
                    _ => {}
                }
            }
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// A line with its inline code spans blanked out (links inside them are not links).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            // Find the closing run of the same length.
            let mut j = i + run;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let r = chars[j..].iter().take_while(|c| **c == '`').count();
                    if r == run {
                        close = Some(j);
                        break;
                    }
                    j += r;
                } else {
                    j += 1;
                }
            }
            match close {
                Some(j) => {
                    out.extend(std::iter::repeat_n(' ', j + run - i));
                    i = j + run;
                }
                None => {
                    out.extend(&chars[i..i + run]);
                    i += run;
                }
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The targets of the inline links and images `[text](target)` of a line, and of reference
/// definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[') {
        if let Some((label, target)) = rest.split_once("]:") {
            if !label.contains(']') {
                if let Some(t) = target.split_whitespace().next() {
                    out.push(t.trim_matches(|c| c == '<' || c == '>').to_string());
                }
            }
        }
    }
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(pos) = line[i..].find("](") {
        let start = i + pos + 2;
        // The target runs to the matching ')' (balanced parentheses inside are allowed).
        let mut depth = 0usize;
        let mut end = None;
        for (j, &b) in bytes.iter().enumerate().skip(start) {
            match b {
                b'(' => depth += 1,
                b')' if depth == 0 => {
                    end = Some(j);
                    break;
                }
                b')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let raw = line[start..end].trim();
        let target = if let Some(r) = raw.strip_prefix('<') {
            r.split('>').next().unwrap_or("").to_string()
        } else {
            raw.split_whitespace().next().unwrap_or("").to_string()
        };
        if !target.is_empty() {
            out.push(target);
        }
        i = end;
    }
    out
}

/// GitHub's anchor for a heading: lowercase; keep letters, digits, spaces, `-` and `_`; spaces
/// become `-`. Inline markup is dropped first (`code` keeps its text, links keep their text).
fn slug(heading: &str) -> String {
    let text = strip_inline_links(heading);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `[text](url)` -> `text`.
fn strip_inline_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

/// The anchors of a markdown file's headings (ATX `#` headings outside code blocks), with
/// GitHub's `-1`, `-2`, ... for repeated ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) {
            continue;
        }
        let rest = &t[hashes..];
        if !(rest.is_empty() || rest.starts_with(' ')) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        let anchor = if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        *n += 1;
        out.insert(anchor);
    }
    out
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
}

/// Undoes `%20`-style escapes in a link's path.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root().canonicalize().expect("the repository root");
    let mut errors = Vec::new();
    let mut checked = 0usize;
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |p: &Path| -> BTreeSet<String> {
        anchor_cache
            .entry(p.to_path_buf())
            .or_insert_with(|| anchors(&std::fs::read_to_string(p).unwrap_or_default()))
            .clone()
    };
    for file in doc_files() {
        let file = file.canonicalize().expect("a doc file");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&file).expect("a readable doc file");
        let dir = file.parent().expect("a parent directory");
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if is_external(&target) {
                    continue;
                }
                checked += 1;
                let (path_part, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let resolved = if path_part.is_empty() {
                    file.clone()
                } else if path_part.starts_with('/') {
                    errors.push(format!(
                        "{shown}:{n}: `{target}`: an absolute path; use one relative to the file"
                    ));
                    continue;
                } else {
                    dir.join(percent_decode(path_part))
                };
                if !resolved.exists() {
                    errors.push(format!(
                        "{shown}:{n}: `{target}`: {} does not exist",
                        resolved.strip_prefix(&root).unwrap_or(&resolved).display()
                    ));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if resolved.extension().is_some_and(|e| e == "md") && resolved.is_file() {
                    let known = anchors_of(&resolved);
                    let want = percent_decode(fragment).to_lowercase();
                    if !known.contains(&want) {
                        errors.push(format!(
                            "{shown}:{n}: `{target}`: no heading with the anchor #{fragment} in {}",
                            resolved
                                .canonicalize()
                                .ok()
                                .as_deref()
                                .and_then(|p| p.strip_prefix(&root).ok())
                                .unwrap_or(&resolved)
                                .display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 0, "no relative link found in the docs");
    assert!(
        errors.is_empty(),
        "broken links in the docs ({}):\n  {}",
        errors.len(),
        errors.join("\n  ")
    );
}

#[test]
fn the_link_checker_reads_markdown_as_github_does() {
    assert_eq!(slug("Policy losses: `ppo.loss`"), "policy-losses-ppoloss");
    assert_eq!(
        slug("`fulcrum train`: GRPO with any aggregation rule"),
        "fulcrum-train-grpo-with-any-aggregation-rule"
    );
    assert_eq!(
        slug("Rollouts on inference engines: vLLM, SGLang, llama.cpp"),
        "rollouts-on-inference-engines-vllm-sglang-llamacpp"
    );
    assert_eq!(
        slug("B2: the `token − seq` relation"),
        "b2-the-token--seq-relation"
    );
    assert_eq!(slug("See [the spec](x.md) now"), "see-the-spec-now");
    assert_eq!(
        link_targets("a [x](docs/a.md#b) and ![i](img/p.png \"t\") and `[no](c.md)`"),
        vec!["docs/a.md#b".to_string(), "img/p.png".to_string()]
    );
    assert_eq!(
        link_targets("[label]: ../x.md"),
        vec!["../x.md".to_string()]
    );
    let text = "# A\n```sh\n[no](x.md)\n# not a heading\n```\n## A\n[yes](y.md)\n";
    let lines: Vec<usize> = prose_lines(text).iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, vec![1, 6, 7]);
    assert_eq!(
        anchors(text),
        ["a", "a-1"].iter().map(|s| s.to_string()).collect()
    );
}

//! The report page: one HTML file with the summary table and every chart embedded as a base64
//! PNG, so it can be mailed or archived alone and opened without a network.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;

/// A heading, a few lines of notes, and its charts `(title, png path)`.
pub struct Section {
    pub heading: String,
    pub notes: Vec<String>,
    pub images: Vec<(String, PathBuf)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The Markdown that `compare` writes (pipe tables, `- ` items, paragraphs) as HTML, so that the
/// page and `summary.md` show one table built in one place.
fn markdown_to_html(md: &str) -> String {
    let mut out = String::new();
    let mut in_table = false;
    let mut header = true;
    for line in md.lines() {
        let t = line.trim();
        if t.starts_with('|') {
            if !in_table {
                out.push_str("<table>\n");
                in_table = true;
                header = true;
            }
            let cells: Vec<&str> = t.trim_matches('|').split('|').map(str::trim).collect();
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
            {
                continue;
            }
            let tag = if header { "th" } else { "td" };
            out.push_str("<tr>");
            for c in cells {
                out.push_str(&format!("<{tag}>{}</{tag}>", esc(c)));
            }
            out.push_str("</tr>\n");
            header = false;
            continue;
        }
        if in_table {
            out.push_str("</table>\n");
            in_table = false;
        }
        if let Some(item) = t.strip_prefix("- ") {
            out.push_str(&format!("<ul><li>{}</li></ul>\n", esc(item)));
        } else if !t.is_empty() {
            out.push_str(&format!("<p>{}</p>\n", esc(t)));
        }
    }
    if in_table {
        out.push_str("</table>\n");
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em auto;max-width:1600px;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:.6em 0}\
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f2f2f2}\
td:first-child,td:nth-child(2){text-align:left}\
figure{display:inline-block;margin:6px;width:48%;min-width:520px;vertical-align:top}\
figure img{width:100%;border:1px solid #ddd}figcaption{font-size:13px;color:#555}";

/// The whole page.
pub fn page(source: &Path, table_md: &str, sections: &[Section]) -> Result<String> {
    let mut h = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>fulcrum report: {0}</title>\
         <style>{STYLE}</style></head><body>\n<h1>fulcrum report</h1>\n<p>Source: <code>{0}</code></p>\n\
         <h2>Summary</h2>\n{1}",
        esc(&source.display().to_string()),
        markdown_to_html(table_md)
    );
    for s in sections {
        h.push_str(&format!("<h2>{}</h2>\n", esc(&s.heading)));
        for n in &s.notes {
            h.push_str(&format!("<div>{}</div>\n", esc(n)));
        }
        for (title, path) in &s.images {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            h.push_str(&format!(
                "<figure><img alt=\"{0}\" src=\"data:image/png;base64,{b64}\"><figcaption>{0}</figcaption></figure>\n",
                esc(title)
            ));
        }
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_become_html_tables_and_text_is_escaped() {
        let html = markdown_to_html("| a | b |\n|---|---|\n| 1 | <2> |\n\n- item & more\n");
        assert!(html.contains("<tr><th>a</th><th>b</th></tr>"), "{html}");
        assert!(html.contains("<td>&lt;2&gt;</td>"), "{html}");
        assert!(html.contains("<li>item &amp; more</li>"), "{html}");
        assert_eq!(html.matches("<table>").count(), 1);
    }
}

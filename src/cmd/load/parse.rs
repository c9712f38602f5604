//! A file's text into its documents' values: JSON as JSON (`kubectl get -o json` of a whole
//! cluster is one `List` of megabytes), anything else as a YAML stream, one document at a
//! time, within a budget that grows with the document's size.

use serde_json::Value;

/// A document of the file: its text, where it starts, and its values (a YAML chunk may hold
/// more than one document: `--- {a: 1}` lines), or why it cannot be read.
pub(super) struct Chunk<'a> {
    /// Its first line in the file.
    pub(super) first_line: u64,
    /// Its first byte in the file.
    pub(super) start: usize,
    pub(super) text: &'a str,
}

/// The documents of `text`: JSON values when the whole text is a stream of them (nothing to
/// gain from YAML's parser, whose node budget refused a large cluster's slices), else YAML
/// documents, each parsed on its own so a syntax error in one leaves the others readable.
pub(super) fn documents(text: &str) -> Vec<(Chunk<'_>, Result<Vec<Value>, serde_saphyr::Error>)> {
    if let Some(docs) = json(text) {
        return docs
            .into_iter()
            .map(|(chunk, value)| (chunk, Ok(vec![value])))
            .collect();
    }
    split(text)
        .into_iter()
        .map(|chunk| {
            let values =
                serde_saphyr::from_str_multiple_with_options(chunk.text, options(chunk.text));
            (chunk, values)
        })
        .collect()
}

/// The values of a text that is JSON (its first character opens an object or an array) with
/// where each one starts; `None` for YAML, and for JSON that does not parse, which the YAML
/// parser then reads (YAML's flow style looks the same) and reports at its place.
fn json(text: &str) -> Option<Vec<(Chunk<'_>, Value)>> {
    if !text.trim_start().starts_with(['{', '[']) {
        return None;
    }
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut out = Vec::new();
    let (mut start, mut line) = (0, 1);
    while let Some(value) = stream.next() {
        let value = value.ok()?;
        let end = stream.byte_offset();
        let text = &text[start..end];
        out.push((
            Chunk {
                first_line: line,
                start,
                text,
            },
            value,
        ));
        line += text.bytes().filter(|b| *b == b'\n').count() as u64;
        start = end;
    }
    Some(out)
}

/// The parser's limits for a YAML document of `text`, proportional to its size. Without
/// aliases a document cannot hold more nodes than it has bytes, so the structural limits only
/// grow past the parser's defaults for large documents (a cluster's `kubectl get -o yaml`);
/// aliases are what can make a small document huge (an alias bomb), and their replays are
/// limited to the size of the document itself, at least a fixed allowance for small ones.
pub(super) fn options(text: &str) -> serde_saphyr::Options {
    let len = text.len();
    let default = serde_saphyr::Budget::default();
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: default.max_nodes.max(len),
            // A node is at most two events (its start and end).
            max_events: default.max_events.max(len.saturating_mul(2)),
            max_total_scalar_bytes: default.max_total_scalar_bytes.max(len),
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: REPLAYS.max(len),
        },
    }
}

/// The alias replays allowed in any YAML document however small: far more than the anchors of
/// a hand-written claim file use, far less than the million of the parser's default (a 1 kB
/// alias bomb would make that a hundred megabytes of values).
const REPLAYS: usize = 100_000;

/// Splits a YAML stream at its document markers, so a syntax error in one document leaves the
/// others readable. A line starting with `---` or `...` followed by a space or its end is a
/// marker wherever it is (YAML 1.2 forbids such a line inside content), so splitting by lines is
/// exact. Directives and comments before a `---` stay with the document they introduce.
pub(super) fn split(text: &str) -> Vec<Chunk<'_>> {
    let is_marker = |line: &str, m: &str| {
        line.strip_prefix(m)
            .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t', '\r']))
    };
    let chunk = |start_line, start, end| Chunk {
        first_line: start_line,
        start,
        text: &text[start..end],
    };
    let mut chunks = Vec::new();
    let (mut start, mut start_line, mut has_content) = (0usize, 1u64, false);
    let mut offset = 0usize;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let line_no = n as u64 + 1;
        let bare = line.trim_end_matches(['\n', '\r']);
        if is_marker(bare, "---") && has_content {
            chunks.push(chunk(start_line, start, offset));
            (start, start_line, has_content) = (offset, line_no, false);
        }
        offset += line.len();
        if is_marker(bare, "...") {
            chunks.push(chunk(start_line, start, offset));
            (start, start_line, has_content) = (offset, line_no + 1, false);
            continue;
        }
        let t = bare.trim_start();
        // A `---` line counts as content: `--- {a: 1}` and `--- |` carry their document.
        let blank = t.is_empty() || t.starts_with('#') || t.starts_with('%');
        let bare_marker = is_marker(bare, "---") && bare[3..].trim().is_empty();
        if !(blank || bare_marker) {
            has_content = true;
        }
    }
    chunks.push(chunk(start_line, start, text.len()));
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[Chunk]) -> Vec<(u64, String)> {
        chunks
            .iter()
            .map(|c| (c.first_line, c.text.to_string()))
            .collect()
    }

    #[test]
    fn split_keeps_each_document_with_its_first_line() {
        let text = "# head\n---\na: 1\n---\nb: |\n  --- not a marker\n...\n%YAML 1.2\n---\nc: 3\n";
        assert_eq!(
            lines(&split(text)),
            vec![
                (1, "# head\n---\na: 1\n".into()),
                (4, "---\nb: |\n  --- not a marker\n...\n".into()),
                (8, "%YAML 1.2\n---\nc: 3\n".into()),
            ]
        );
        assert_eq!(lines(&split("a: 1\n")), vec![(1, "a: 1\n".into())]);
        assert_eq!(
            lines(&split("--- {a: 1}\n--- {b: 2}\n")),
            vec![(1, "--- {a: 1}\n".into()), (2, "--- {b: 2}\n".into())]
        );
        for c in split(text) {
            assert_eq!(&text[c.start..c.start + c.text.len()], c.text);
        }
    }

    #[test]
    fn json_is_read_as_json_each_value_at_its_line() {
        let text = "\n{\"a\": 1}\n\n[1,\n 2] {\"b\":\n\"x\"}\n";
        let docs = json(text).unwrap();
        let got: Vec<(u64, Value)> = docs
            .iter()
            .map(|(c, v)| (c.first_line, v.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (1, serde_json::json!({"a": 1})),
                (2, serde_json::json!([1, 2])),
                (5, serde_json::json!({"b": "x"})),
            ]
        );
        for (c, _) in &docs {
            assert_eq!(&text[c.start..c.start + c.text.len()], c.text);
        }
        // YAML's flow style, and JSON with a syntax error, are left to the YAML parser.
        assert!(json("{a: 1}").is_none());
        assert!(json("{\"a\": }").is_none());
        assert!(json("a: {\"b\": 1}").is_none());
    }

    /// A document of 2n + 1 lines: nested anchors, each aliasing the one before ten times.
    fn alias_bomb(levels: usize) -> String {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..levels {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        text
    }

    #[test]
    fn an_alias_bomb_is_refused_and_large_plain_documents_are_not() {
        // 10^9 values from under a kilobyte: refused after a bounded number of replays.
        let bomb = alias_bomb(9);
        assert!(bomb.len() < 1000);
        let e = serde_saphyr::from_str_multiple_with_options::<Value, Vec<Value>>(
            &bomb,
            options(&bomb),
        )
        .unwrap_err();
        assert!(e.to_string().contains("alias"), "{e}");
        // A few anchors used a few times are fine.
        let small = alias_bomb(3);
        let v: Vec<Value> =
            serde_saphyr::from_str_multiple_with_options(&small, options(&small)).unwrap();
        assert_eq!(v[0]["a2"].as_array().map(Vec::len), Some(10));
        // A plain document of more nodes than the parser's default budget (250,000).
        let mut big = String::from("items:\n");
        for i in 0..100_000 {
            big.push_str(&format!("- {{name: d{i}, n: {i}}}\n"));
        }
        let v: Vec<Value> =
            serde_saphyr::from_str_multiple_with_options(&big, options(&big)).unwrap();
        assert_eq!(v[0]["items"].as_array().map(Vec::len), Some(100_000));
        assert!(serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&big).is_err());
    }
}

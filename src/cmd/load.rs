//! Reading Kubernetes objects from YAML or JSON files (`dranet check`'s claims, `--slices`,
//! `--classes`), with errors as precise as the API server's strict decoding: the file, the
//! document, its kind and name, the field path and the line and column.
//!
//! Every document of every file is read before anything is checked, and every bad one is
//! reported (not only the first), so one run shows all that must be fixed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use k8s_openapi::serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

mod parse;

/// What is wrong with one input file or one document of it, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// The file (`-` for standard input).
    pub file: PathBuf,
    /// 1-based document number in the file (`None`: the file as a whole).
    pub doc: Option<usize>,
    /// `Kind name` of the object, when readable.
    pub object: Option<String>,
    /// The field path from the object's root (`spec.devices.requests[0].exactly.count`).
    pub field: Option<String>,
    /// 1-based line and column in the file.
    pub at: Option<(u64, u64)>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `file:line:column:` first, as compilers do: editors and CI annotations jump there.
        match self.file.to_str() {
            Some("-") => write!(f, "<stdin>")?,
            _ => write!(f, "{}", self.file.display())?,
        }
        if let Some((line, column)) = self.at {
            write!(f, ":{line}:{column}")?;
        }
        if let Some(doc) = self.doc {
            write!(f, ": document {doc}")?;
            if let Some(o) = &self.object {
                write!(f, " ({o})")?;
            }
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// All the input errors of a run, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputErrors(pub Vec<InputError>);

impl fmt::Display for InputErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// One Kubernetes object of a file: a document, or an item of a `kind: List` document.
#[derive(Debug)]
pub struct Doc {
    /// The file.
    pub file: PathBuf,
    /// 1-based document number.
    pub number: usize,
    /// The object.
    pub value: serde_json::Value,
    /// `items[i]` for an item of a List, else empty: the object's path in its document.
    prefix: String,
    /// The document's text, for the positions of an error.
    source: Rc<Source>,
}

/// One document's text (a range of the file's, which its documents share) and where it starts
/// in the file; where each node of it is, parsed only when an error needs a position (a second
/// parse would double the loading time of every run).
#[derive(Debug)]
struct Source {
    text: Rc<String>,
    range: std::ops::Range<usize>,
    first_line: u64,
    tree: std::cell::OnceCell<Option<Spanned<Tree>>>,
}

impl Source {
    fn tree(&self) -> Option<&Spanned<Tree>> {
        self.tree
            .get_or_init(|| {
                let text = self.text.get(self.range.clone())?;
                serde_saphyr::from_str_with_options(text, parse::options(text)).ok()
            })
            .as_ref()
    }
}

impl Doc {
    /// The object's `kind`.
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("")
    }

    /// The object's `metadata.name`.
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or("")
    }

    /// An error about `field` (a path from the object's root, empty for the whole object).
    pub fn error(&self, field: &str, reason: impl Into<String>) -> InputError {
        self.error_at(field, reason, false)
    }

    /// [`Doc::error`] at the field's key (`on_value` false: an unknown field) or at its value (a
    /// wrong type).
    fn error_at(&self, field: &str, reason: impl Into<String>, on_value: bool) -> InputError {
        let (field, at) = self.locate(field, on_value);
        let object = match (self.kind(), self.name()) {
            ("", _) => None,
            (k, "") => Some(k.to_string()),
            (k, n) => Some(format!("{k} {n}")),
        };
        InputError {
            file: self.file.clone(),
            doc: Some(self.number),
            object,
            field: (!field.is_empty()).then_some(field),
            at,
            reason: reason.into(),
        }
    }

    /// Decodes `value`, the part of this object at `at` (e.g. `spec.spec` of a template), into
    /// `T`. A wrong type is an error naming the field path; with `strict`, so is a field `T`
    /// does not have (the API server's strict decoding: a `selector:` typo for `selectors:` is
    /// refused, not silently dropped).
    pub fn decode<T>(
        &self,
        at: &str,
        value: &serde_json::Value,
        strict: bool,
    ) -> Result<T, Vec<InputError>>
    where
        T: DeserializeOwned + k8s_openapi::serde::Serialize,
    {
        let join = |p: &str| match (at.is_empty(), p.is_empty()) {
            (true, _) => p.to_string(),
            (false, true) => at.to_string(),
            (false, false) if p.starts_with('[') => format!("{at}{p}"),
            (false, false) => format!("{at}.{p}"),
        };
        // Plainly first; again, tracking the path, only to say where it failed.
        let typed: T = match T::deserialize(value) {
            Ok(t) => t,
            Err(plain) => {
                let Err(e) = serde_path_to_error::deserialize::<_, T>(value) else {
                    return Err(vec![self.error_at(at, plain.to_string(), true)]);
                };
                let path = field_path(e.path());
                let reason = e.inner().to_string();
                return Err(vec![self.error_at(&join(&path), reason, true)]);
            }
        };
        if strict {
            let back =
                serde_json::to_value(&typed).map_err(|e| vec![self.error(at, e.to_string())])?;
            let mut unknown = Vec::new();
            unknown_fields(value, &back, &mut Vec::new(), &mut unknown);
            let mut errors: Vec<InputError> = unknown
                .iter()
                .map(|steps| {
                    let (parent, name) = match steps.split_last() {
                        Some((Step::Key(k), parent)) => (parent, k.as_str()),
                        _ => (&steps[..], ""),
                    };
                    let reason = unknown_field_reason::<T>(parent, name);
                    self.error(&join(&path_text(steps)), reason)
                })
                .collect();
            if !errors.is_empty() {
                // In the file's order (the keys were visited sorted).
                errors.sort_by_key(|e| e.at);
                return Err(errors);
            }
        }
        Ok(typed)
    }

    /// The path as the user wrote it and its position: a v1beta1 request has no `exactly`, so
    /// a path through the v1 shape is looked up without it too.
    fn locate(&self, field: &str, on_value: bool) -> (String, Option<(u64, u64)>) {
        let full = match (self.prefix.is_empty(), field.is_empty()) {
            (true, _) => field.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}.{field}", self.prefix),
        };
        let first_line = self.source.first_line;
        let Some(tree) = self.source.tree() else {
            return (field.to_string(), None);
        };
        let without_exactly = full.replace(".exactly.", ".");
        for candidate in [&full, &without_exactly] {
            if let Some(l) = lookup(tree, &segments(candidate), on_value) {
                let shown = match self.prefix.is_empty() {
                    true => candidate.clone(),
                    false => candidate[self.prefix.len()..]
                        .trim_start_matches('.')
                        .to_string(),
                };
                return (shown, Some((l.line() + first_line - 1, l.column())));
            }
        }
        // Not in the file (a missing field): the closest enclosing node that is.
        let segs = segments(&full);
        let at = (0..segs.len())
            .rev()
            .find_map(|n| lookup(tree, &segs[..n], true))
            .map(|l| (l.line() + first_line - 1, l.column()));
        (field.to_string(), at)
    }
}

/// `spec.devices.requests[0].exactly` from serde_path_to_error's path.
fn field_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for s in p.iter() {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `devices.requests[0].exactly`.
fn path_text(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Index(i) => out.push_str(&format!("[{i}]")),
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
        }
    }
    out
}

/// Every key of `input` that decoding into the typed object dropped, as paths
/// (`devices.requests[0].exactly.selector`). Null values are not fields.
fn unknown_fields(
    input: &serde_json::Value,
    typed: &serde_json::Value,
    at: &mut Vec<Step>,
    out: &mut Vec<Vec<Step>>,
) {
    use serde_json::Value;
    match (input, typed) {
        (Value::Object(i), Value::Object(t)) => {
            for (k, v) in i.iter().filter(|(_, v)| !v.is_null()) {
                at.push(Step::Key(k.clone()));
                match t.get(k) {
                    None => out.push(at.clone()),
                    Some(tv) => unknown_fields(v, tv, at, out),
                }
                at.pop();
            }
        }
        (Value::Array(i), Value::Array(t)) => {
            for (n, (iv, tv)) in i.iter().zip(t).enumerate() {
                at.push(Step::Index(n));
                unknown_fields(iv, tv, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// What to say about an unknown field `name` of the object at `parent` in a `T`: the field
/// meant, when one is close, else the fields there are.
fn unknown_field_reason<T: DeserializeOwned>(parent: &[Step], name: &str) -> String {
    const REJECTS: &str = "the API server rejects unknown fields";
    let Some(fields) = probe::fields::<T>(parent) else {
        return format!("unknown field ({REJECTS}; check its spelling)");
    };
    // clap's own threshold for its did-you-mean on flags.
    let close = fields
        .iter()
        .map(|f| (strsim::jaro(name, f), *f))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match close {
        Some((_, f)) => format!("unknown field, did you mean {f:?}? ({REJECTS})"),
        None => format!(
            "unknown field ({REJECTS}; the fields here are {})",
            fields.join(", ")
        ),
    }
}

/// The field names of the struct at a path of a type, asked of its own `Deserialize`: serde
/// passes them to `deserialize_struct`, so they are exactly the names the API uses.
mod probe {
    use std::cell::Cell;

    use k8s_openapi::serde::de::value::{Error, StrDeserializer};
    use k8s_openapi::serde::de::{
        DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IntoDeserializer, MapAccess,
        SeqAccess, Visitor,
    };

    use super::Step;

    type Fields = Cell<Option<&'static [&'static str]>>;

    /// The fields of the struct at `path` in `T`, when there is one.
    pub(super) fn fields<T: DeserializeOwned>(path: &[Step]) -> Option<&'static [&'static str]> {
        let found = Cell::new(None);
        // The probe always ends in an error (it has no values to give): the fields are the
        // result.
        let _ = T::deserialize(Probe {
            path,
            found: &found,
        });
        found.get()
    }

    /// A deserializer that follows `path` and records the fields of the struct at its end.
    struct Probe<'a> {
        path: &'a [Step],
        found: &'a Fields,
    }

    impl Probe<'_> {
        fn stop<T>() -> Result<T, Error> {
            Err(Error::custom("probe"))
        }
    }

    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Self::stop()
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, Error> {
            if self.path.is_empty() {
                self.found.set(Some(fields));
                return Self::stop();
            }
            // A struct is read as a map: the path's key is one of its fields.
            self.deserialize_map(v)
        }

        fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            match self.path.split_first() {
                Some((Step::Key(k), rest)) => v.visit_map(Entry {
                    key: Some(k),
                    value: Probe {
                        path: rest,
                        found: self.found,
                    },
                }),
                _ => Self::stop(),
            }
        }

        fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            match self.path.split_first() {
                Some((Step::Index(_), rest)) => v.visit_seq(Item(Some(Probe {
                    path: rest,
                    found: self.found,
                }))),
                _ => Self::stop(),
            }
        }

        fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.visit_some(self)
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            v: V,
        ) -> Result<V::Value, Error> {
            v.visit_newtype_struct(self)
        }

        k8s_openapi::serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf unit unit_struct tuple tuple_struct enum identifier ignored_any
        }
    }

    /// A map of one entry: the path's key, then the probe for the rest.
    struct Entry<'a> {
        key: Option<&'a str>,
        value: Probe<'a>,
    }

    impl<'de> MapAccess<'de> for Entry<'_> {
        type Error = Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, Error> {
            match self.key.take() {
                Some(k) => {
                    let d: StrDeserializer<'_, Error> = k.into_deserializer();
                    seed.deserialize(d).map(Some)
                }
                None => Ok(None),
            }
        }

        fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
            seed.deserialize(Probe {
                path: self.value.path,
                found: self.value.found,
            })
        }
    }

    /// A sequence of one item: the probe for the rest of the path.
    struct Item<'a>(Option<Probe<'a>>);

    impl<'de> SeqAccess<'de> for Item<'_> {
        type Error = Error;

        fn next_element_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, Error> {
            match self.0.take() {
                Some(p) => seed.deserialize(p).map(Some),
                None => Ok(None),
            }
        }
    }
}

/// A path's segments: `a.b[0].c` is `a`, `b`, `[0]`, `c`. Keys with dots (attribute names
/// such as `dra.net/numaNode`) are not split where the file has them whole: see [`lookup`].
fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(key.to_string());
        }
        out.extend(
            rest.split_inclusive(']')
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
    }
    out
}

/// Where a YAML node is: a mapping's keys (with their own position, the one shown for an
/// unknown field), a sequence's items, or a scalar.
#[derive(Debug)]
enum Tree {
    Map(Vec<(Spanned<String>, Spanned<Tree>)>),
    Seq(Vec<Spanned<Tree>>),
    Leaf,
}

/// The position of the node at `path`: of its key for a mapping entry unless `on_value`, of the
/// item for a sequence.
fn lookup(tree: &Spanned<Tree>, path: &[String], on_value: bool) -> Option<Location> {
    let Some((first, rest)) = path.split_first() else {
        return Some(tree.referenced);
    };
    match &tree.value {
        Tree::Seq(items) => {
            let i: usize = first.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?;
            lookup(items.get(i)?, rest, on_value)
        }
        Tree::Map(entries) => {
            // A key may itself contain dots: take the longest run of segments that names one.
            (1..=path.len()).rev().find_map(|n| {
                let key = path[..n].join(".");
                let (k, v) = entries.iter().find(|(k, _)| k.value == key)?;
                match n == path.len() && !on_value {
                    true => Some(k.referenced),
                    false => lookup(v, &path[n..], on_value),
                }
            })
        }
        Tree::Leaf => None,
    }
}

/// `fn visit_x<E>(self, _: T) -> Result<Tree, E> { Ok(Tree::Leaf) }` for each `visit_x(T)`.
macro_rules! leaves {
    ($($name:ident($t:ty)),* $(,)?) => {
        $(fn $name<E>(self, _: $t) -> Result<Tree, E> {
            Ok(Tree::Leaf)
        })*
    };
}

impl<'de> de::Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tree;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Tree, A::Error> {
                let mut entries = Vec::new();
                while let Some(k) = m.next_key::<Spanned<KeyText>>()? {
                    let v = m.next_value()?;
                    let k = Spanned::new(k.value.0, k.referenced, k.defined);
                    entries.push((k, v));
                }
                Ok(Tree::Map(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Tree, A::Error> {
                let mut items = Vec::new();
                while let Some(i) = s.next_element()? {
                    items.push(i);
                }
                Ok(Tree::Seq(items))
            }
            // Scalars: only their position matters, and that is in the Spanned around them.
            leaves! {
                visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_i128(i128),
                visit_u128(u128), visit_f64(f64), visit_str(&str)
            }
            fn visit_unit<E>(self) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_none<E>(self) -> Result<Tree, E> {
                Ok(Tree::Leaf)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
                d.deserialize_any(V)
            }
        }
        d.deserialize_any(V)
    }
}

/// A mapping key as text, whatever its YAML type (`1:` and `true:` are keys too).
struct KeyText(String);

impl<'de> de::Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E>(self, s: &str) -> Result<KeyText, E> {
                Ok(KeyText(s.to_string()))
            }
            fn visit_bool<E>(self, b: bool) -> Result<KeyText, E> {
                Ok(KeyText(b.to_string()))
            }
            fn visit_i64<E>(self, i: i64) -> Result<KeyText, E> {
                Ok(KeyText(i.to_string()))
            }
            fn visit_u64<E>(self, i: u64) -> Result<KeyText, E> {
                Ok(KeyText(i.to_string()))
            }
            fn visit_f64<E>(self, x: f64) -> Result<KeyText, E> {
                Ok(KeyText(x.to_string()))
            }
            fn visit_unit<E>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The objects of a file (`-`: standard input), `kind: List` flattened, empty documents skipped.
/// A document that cannot be read is added to `errors` and the others are still returned.
pub fn documents(path: &Path, errors: &mut Vec<InputError>) -> Vec<Doc> {
    let file_error = |reason: String| InputError {
        file: path.to_path_buf(),
        doc: None,
        object: None,
        field: None,
        at: None,
        reason,
    };
    let read = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    let text = match read {
        Ok(t) => t,
        Err(e) => {
            errors.push(file_error(e.to_string()));
            return Vec::new();
        }
    };
    let text = Rc::new(text);
    let mut out = Vec::new();
    let mut number = 0;
    for (chunk, values) in parse::documents(&text) {
        let values = match values {
            Ok(v) => v,
            Err(e) => {
                number += 1;
                errors.push(yaml_error(path, number, &chunk, &e));
                continue;
            }
        };
        let source = Rc::new(Source {
            text: Rc::clone(&text),
            range: chunk.start..chunk.start + chunk.text.len(),
            first_line: chunk.first_line,
            tree: std::cell::OnceCell::new(),
        });
        for v in values {
            if v.is_null() {
                continue;
            }
            number += 1;
            let doc = |value, prefix| Doc {
                file: path.to_path_buf(),
                number,
                value,
                prefix,
                source: source.clone(),
            };
            let list = v["kind"].as_str().is_some_and(|k| k.ends_with("List"));
            match v {
                // The items are moved out, not copied: a cluster's list is megabytes.
                serde_json::Value::Object(mut m)
                    if list && m.get("items").is_some_and(|i| i.is_array()) =>
                {
                    if let Some(serde_json::Value::Array(items)) = m.remove("items") {
                        out.extend(
                            items
                                .into_iter()
                                .enumerate()
                                .map(|(i, x)| doc(x, format!("items[{i}]"))),
                        );
                    }
                }
                v => out.push(doc(v, String::new())),
            }
        }
    }
    out
}

/// A YAML syntax error in one line, at its place in the file (the parser's own rendering is a
/// multi-line snippet, and its lines count from the document's start).
fn yaml_error(
    path: &Path,
    number: usize,
    chunk: &parse::Chunk,
    e: &serde_saphyr::Error,
) -> InputError {
    let plain = e.without_snippet().to_string();
    let first = plain.lines().next().unwrap_or("invalid YAML").trim();
    // The message ends with the position in the document: say it once, in the file's terms.
    let reason = match first.rfind(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    InputError {
        file: path.to_path_buf(),
        doc: Some(number),
        object: None,
        field: None,
        at: e
            .location()
            .filter(|l| l.line() > 0)
            .map(|l| (l.line() + chunk.first_line - 1, l.column())),
        reason: format!("invalid YAML: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_name_the_field_meant_or_the_fields_there_are() {
        use k8s_openapi::api::resource::v1::ResourceClaimSpec;
        let path = [
            Step::Key("devices".into()),
            Step::Key("requests".into()),
            Step::Index(0),
            Step::Key("exactly".into()),
        ];
        let reason = |p: &[Step], name| unknown_field_reason::<ResourceClaimSpec>(p, name);
        assert!(reason(&path, "selector").contains("did you mean \"selectors\"?"));
        assert!(reason(&path, "devicClass").contains("did you mean \"deviceClassName\"?"));
        assert!(
            reason(&path[..1], "zzz").contains("the fields here are config, constraints, requests"),
            "{}",
            reason(&path[..1], "zzz")
        );
        // Through a map (attribute names) and a list.
        use k8s_openapi::api::resource::v1::ResourceSlice;
        let attr = [
            Step::Key("spec".into()),
            Step::Key("devices".into()),
            Step::Index(3),
            Step::Key("attributes".into()),
            Step::Key("dra.net/numaNode".into()),
        ];
        assert!(
            unknown_field_reason::<ResourceSlice>(&attr, "integer").contains("\"int\""),
            "{}",
            unknown_field_reason::<ResourceSlice>(&attr, "integer")
        );
        // A path the type does not have: no suggestion, no panic.
        assert!(reason(&[Step::Key("nope".into())], "x").contains("check its spelling"));
    }

    #[test]
    fn segments_and_lookup_follow_keys_with_dots() {
        assert_eq!(
            segments("spec.devices[0].attributes.dra.net/numaNode"),
            [
                "spec",
                "devices",
                "[0]",
                "attributes",
                "dra",
                "net/numaNode"
            ]
        );
        let yaml =
            "spec:\n  devices:\n  - name: a\n    attributes:\n      dra.net/numaNode: {int: x}\n";
        let tree: Spanned<Tree> = serde_saphyr::from_str(yaml).unwrap();
        let at = |p: &str, v| lookup(&tree, &segments(p), v).map(|l| (l.line(), l.column()));
        assert_eq!(at("spec.devices[0].name", false), Some((3, 5)));
        assert_eq!(at("spec.devices[0].name", true), Some((3, 11)));
        let numa = "spec.devices[0].attributes.dra.net/numaNode";
        assert_eq!(at(numa, false), Some((5, 7)));
        assert_eq!(at(&format!("{numa}.int"), true), Some((5, 31)));
        assert_eq!(at("spec.devices[1]", true), None);
    }
}

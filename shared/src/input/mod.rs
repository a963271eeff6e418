//! The bounds every reader of a file, standard input or cluster text shares: snapshots,
//! `alfredConfig`, `solve` problem files and OME's defaults ConfigMap. YAML becomes JSON text
//! here, once, under a budget (no alias expansion past the document's own size, no nesting past
//! [`MAX_DEPTH`], no repeated key, no NaN); JSON is checked for the same. The typed read that
//! follows then sees one well-formed form, whatever the file was written in.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write as _;

use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

mod strict;
use strict::Strict;

/// The largest file or standard input a reader takes. Memory is the text plus the objects
/// kept: 36 MB of pods and nodes peak at 300 MB, JSON or YAML.
pub const MAX_INPUT_BYTES: u64 = 2 << 30;
/// The deepest nesting of mappings and lists. The objects Alfred reads stay under 30 levels
/// (OME's CRDs, 20); deeper input would only cost stack.
pub const MAX_DEPTH: usize = 64;
/// What aliases may add to a YAML document beyond its own size.
const ALIAS_ALLOWANCE: usize = 64 << 10;

/// What is wrong with a text, and where (1-based line and column in the whole text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}{}", at(*.line, *.column))]
pub struct InputError {
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub message: String,
}

fn at(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

impl InputError {
    fn new(message: impl Into<String>) -> InputError {
        InputError {
            line: None,
            column: None,
            message: message.into(),
        }
    }
}

/// True when the text is JSON (its first character opens an object or array).
fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
}

/// Feeds each document of a JSON stream or multi-document YAML to `f` as checked JSON text,
/// with its 1-based index; empty YAML documents are passed over. `E` is the caller's error,
/// made from a document's index and what is wrong with it.
pub fn for_each_document<E>(
    text: &str,
    mut f: impl FnMut(usize, &str) -> Result<(), E>,
    invalid: impl Fn(usize, InputError) -> E,
) -> Result<(), E> {
    let mut document = 0;
    if is_json(text) {
        let stream =
            serde_json::Deserializer::from_str(text).into_iter::<&serde_json::value::RawValue>();
        for doc in stream {
            document += 1;
            let doc = doc.map_err(|e| invalid(document, json_error(&e, "not valid JSON")))?;
            check_json(doc.get()).map_err(|e| invalid(document, e))?;
            f(document, doc.get())?;
        }
        return Ok(());
    }
    for (index, (first_line, part)) in yaml_parts(text).enumerate() {
        let docs = yaml_to_json(part).map_err(|mut e| {
            e.line = e.line.map(|l| l + first_line - 1);
            invalid(document + 1, e)
        })?;
        for json in docs {
            // Comments before the first `---` are no document; an empty one after it is.
            if json == "null" && index == 0 {
                continue;
            }
            document += 1;
            if json != "null" {
                f(document, &json)?;
            }
        }
    }
    Ok(())
}

/// Reads a text holding one YAML or JSON document as `T`; errors name the field path.
pub fn read_one<T: DeserializeOwned>(text: &str) -> Result<T, InputError> {
    let (mut found, mut documents) = (None::<String>, 0);
    for_each_document(
        text,
        |_, json| {
            documents += 1;
            found.get_or_insert_with(|| json.to_string());
            Ok(())
        },
        |_, e| e,
    )?;
    let json = match (found, documents) {
        (Some(json), 1) => json,
        (None, _) => return Err(InputError::new("the file holds no document")),
        (Some(_), n) => {
            return Err(InputError::new(format!(
                "the file holds {n} documents; it must hold one"
            )));
        }
    };
    typed(&json)
}

/// Deserializes checked JSON text, naming the field path of the first error.
fn typed<T: DeserializeOwned>(json: &str) -> Result<T, InputError> {
    located(json).map_err(|(path, message)| {
        InputError::new(match path {
            Some(path) => format!("{path}: {message}"),
            None => message,
        })
    })
}

/// Deserializes checked JSON text, structs from mappings only ([`Strict`]). Err is the field
/// path of the first error (None at the top) and what is wrong. Path tracking halves the
/// speed, so it runs only to locate an error the plain read found.
pub fn located<T: DeserializeOwned>(json: &str) -> Result<T, (Option<String>, String)> {
    if let Ok(value) = from_json(json) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(Strict(&mut de)).map_err(|e| {
        let path = e.path().to_string();
        ((path != ".").then_some(path), without_position(e.inner()))
    })
}

/// Deserializes JSON text, structs from mappings only ([`Strict`]).
pub fn from_json<'a, T: Deserialize<'a>>(json: &'a str) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value = T::deserialize(Strict(&mut de))?;
    de.end()?;
    Ok(value)
}

/// serde_json's message without "at line L column C", which would point inside one value,
/// and cut as [`cut_message`] cuts (its messages quote the value they refuse).
/// An unknown key is named with the closest known one.
pub fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let text = text.rfind(" at line ").map_or(&*text, |at| &text[..at]);
    cut_message(&with_closest_key(text))
}

/// serde's "unknown field `x`, expected one of `a`, `b`" becomes "unknown field `x`; did you
/// mean `a`?" when a known key is near enough to be a misspelling of `x` (else it stays).
fn with_closest_key(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    let known = expected.split('`').skip(1).step_by(2);
    let distance = |k: &str| edit_distance(&unknown.to_lowercase(), &k.to_lowercase());
    let Some((best, d)) = known.map(|k| (k, distance(k))).min_by_key(|(_, d)| *d) else {
        return message.to_string();
    };
    if d > (unknown.chars().count() / 3).max(2) {
        return message.to_string();
    }
    format!("unknown field `{unknown}`; did you mean `{best}`?")
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// How much of a value a message quotes, and of a message built on a library's.
const VALUE_CHARS: usize = 200;
const MESSAGE_CHARS: usize = 1000;

/// A value from the input as a message quotes it: past 200 characters it is cut and its
/// length given, so a 7 MiB annotation is not echoed whole into logs and answers.
pub fn quoted(value: &str) -> String {
    match value.char_indices().nth(VALUE_CHARS) {
        None => format!("{value:?}"),
        Some((at, _)) => format!("{:?}... ({} bytes)", &value[..at], value.len()),
    }
}

/// A message that may hold input (a library's error), cut past 1,000 characters.
pub fn cut_message(message: &str) -> String {
    match message.char_indices().nth(MESSAGE_CHARS) {
        None => message.to_string(),
        Some((at, _)) => format!("{}... ({} bytes in all)", &message[..at], message.len()),
    }
}

fn json_error(e: &serde_json::Error, what: &str) -> InputError {
    InputError {
        line: Some(e.line() as u64),
        column: Some(e.column() as u64),
        message: format!("{what}: {}", without_position(e)),
    }
}

// ---------------------------------------------------------------------------------------------
// YAML

/// The text cut at its document markers (`---` at the start of a line, which YAML never allows
/// inside a value), with the first line of each part; documents are then read one at a time.
fn yaml_parts(text: &str) -> impl Iterator<Item = (u64, &str)> {
    let mut starts = vec![(1, 0)];
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let rest = line.strip_prefix("---");
        if offset > 0
            && rest.is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t', '\r', '\n']))
        {
            starts.push((index as u64 + 1, offset));
        }
        offset += line.len();
    }
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .map(|(_, o)| *o)
        .chain([text.len()])
        .collect();
    starts
        .into_iter()
        .zip(ends)
        .map(move |((line, start), end)| (line, &text[start..end]))
}

/// One part of a YAML stream (usually one document) as JSON texts, one per document.
fn yaml_to_json(part: &str) -> Result<Vec<String>, InputError> {
    let mut out = String::with_capacity(part.len());
    let one =
        serde_saphyr::with_deserializer_from_str_with_options(part, yaml_options(part), |de| {
            Transcode(&mut out).deserialize(de)
        });
    match one {
        Ok(()) => Ok(vec![out]),
        // `...` ends a document without a `---` after it.
        Err(serde_saphyr::Error::MultipleDocuments { .. }) => {
            serde_saphyr::from_multiple_with_options::<JsonText>(part, yaml_options(part))
                .map(|docs| docs.into_iter().map(|d| d.0).collect())
                .map_err(|e| yaml_error(&e, part.len()))
        }
        Err(e) => Err(yaml_error(&e, part.len())),
    }
}

fn yaml_options(part: &str) -> serde_saphyr::Options {
    let allowance = part.len() + ALIAS_ALLOWANCE;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    budget.max_events = allowance;
    budget.max_nodes = allowance;
    budget.max_aliases = allowance;
    budget.max_anchors = allowance;
    budget.max_documents = allowance;
    budget.max_total_scalar_bytes = allowance;
    budget.max_recorded_anchor_bytes = allowance;
    budget.max_recorded_anchor_events = allowance;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = allowance;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    // YAML 1.2's core schema, as the API server's decoder reads it: `yes` and `0755` stay text.
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.with_snippet = false;
    options
}

fn yaml_error(e: &serde_saphyr::Error, size: usize) -> InputError {
    use serde_saphyr::budget::BudgetBreach as B;
    let location = e.location().filter(|l| l.line() > 0);
    let mut e = e;
    // The error itself, under what says where an alias or snippet led to it.
    while let serde_saphyr::Error::AliasError { error, .. }
    | serde_saphyr::Error::WithSnippet { error, .. } = e
    {
        e = error;
    }
    let message = match e {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => format!(
            "key `{}` appears twice in one mapping; a mapping holds each key once",
            key.as_deref().unwrap_or("?")
        ),
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            B::Depth { .. } => too_deep(),
            B::ScalarBytes { .. } | B::RecordedAnchorBytes { .. } => format!(
                "aliases expand the document past its own size ({size} bytes) plus {ALIAS_ALLOWANCE}: write the values out"
            ),
            B::AliasAnchorRatio { .. } | B::Aliases { .. } | B::RecordedAnchorEvents { .. } => {
                "aliases repeat too much: write the values out".into()
            }
            other => {
                format!("more than the reader's bound for a document of {size} bytes ({other:?})")
            }
        },
        serde_saphyr::Error::NonFiniteFloat { value, .. } => not_a_number(value),
        // The parser's own error for flow collections nested too deep.
        serde_saphyr::Error::ExternalMessage { source, .. }
            if matches!(
                &**source,
                serde_saphyr::ExternalMessageSource::Parser(scan)
                    if matches!(scan.kind(), serde_saphyr::granit_parser::ErrorKind::RecursionLimitExceeded)
            ) =>
        {
            too_deep()
        }
        other => {
            let text = other.to_string();
            text.find(" at line ")
                .map_or(&*text, |at| &text[..at])
                .to_string()
        }
    };
    InputError {
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
        message: format!("not valid YAML: {message}"),
    }
}

fn too_deep() -> String {
    format!("nested deeper than {MAX_DEPTH} levels")
}

fn not_a_number(value: &str) -> String {
    format!("{value} is not a number a reader can use; write a finite number")
}

/// One YAML document written straight out as JSON text, without a tree in between.
struct JsonText(String);

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = String::new();
        Transcode(&mut out).deserialize(d)?;
        Ok(JsonText(out))
    }
}

struct Transcode<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaping of a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML value that JSON can hold")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }
    fn visit_i128<E>(self, v: i128) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }
    fn visit_u128<E>(self, v: u128) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        if !v.is_finite() {
            return Err(E::custom(not_a_number(&v.to_string())));
        }
        self.0
            .push_str(&serde_json::to_string(&v).unwrap_or_default());
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        push_json_str(self.0, v);
        Ok(())
    }
    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
        Err(E::custom("binary values are not read; write text"))
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(',');
            }
            if seq.next_element_seed(Transcode(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            first = false;
        }
        self.0.push(']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<Key>()? {
            if !first {
                self.0.push(',');
            }
            first = false;
            push_json_str(self.0, &key.0);
            self.0.push(':');
            map.next_value_seed(Transcode(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

/// A mapping key as JSON's text key: strings, and numbers and booleans as written.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping key that is text, a number or a boolean")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

// ---------------------------------------------------------------------------------------------
// JSON

/// Refuses what serde_json reads silently: a key repeated in one object (the last would win)
/// and nesting past [`MAX_DEPTH`]. Errors name the path of the object.
pub fn check_json(json: &str) -> Result<(), InputError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let (mut path, mut keys) = (Vec::new(), Vec::new());
    Check {
        path: &mut path,
        keys: &mut keys,
    }
    .deserialize(&mut de)
    .map_err(|e| json_error(&e, "not valid JSON"))
}

/// One step of a path: an object's key or an array's index.
enum Segment<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

/// `spec.containers[0]`, or "the top level".
fn path_text(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) if out.is_empty() => out.push_str(key),
            Segment::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    if out.is_empty() {
        out.push_str("the top level");
    }
    out
}

/// An object key, borrowed from the text unless it holds escapes.
struct KeyText<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyText<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The walk: the path so far (its length is the depth), and the keys of every object open
/// along it, each object's above its parent's (one stack, so no allocation per object).
struct Check<'p, 'de> {
    path: &'p mut Vec<Segment<'de>>,
    keys: &'p mut Vec<Cow<'de, str>>,
}

impl<'de> Check<'_, 'de> {
    /// The value at `segment`, walked by `f`.
    fn nested<E: serde::de::Error, T>(
        &mut self,
        segment: Segment<'de>,
        f: impl FnOnce(Check<'_, 'de>) -> Result<T, E>,
    ) -> Result<T, E> {
        if self.path.len() >= MAX_DEPTH {
            return Err(E::custom(format!(
                "{} at {}",
                too_deep(),
                path_text(self.path)
            )));
        }
        self.path.push(segment);
        let result = f(Check {
            path: self.path,
            keys: self.keys,
        });
        self.path.pop();
        result
    }
}

impl<'de> DeserializeSeed<'de> for Check<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        for index in 0.. {
            let more = self.nested(Segment::Index(index), |c| seq.next_element_seed(c))?;
            if more.is_none() {
                break;
            }
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let first = self.keys.len();
        // Most objects have a few keys: a scan beats hashing until there are many.
        let mut many: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(KeyText(key)) = map.next_key()? {
            let seen = if self.keys.len() - first < 16 {
                self.keys[first..].contains(&key)
            } else {
                if many.is_empty() {
                    many.extend(self.keys[first..].iter().cloned());
                }
                !many.insert(key.clone())
            };
            if seen {
                return Err(A::Error::custom(format!(
                    "key `{key}` appears twice in the object at {}; an object holds each key once",
                    path_text(self.path)
                )));
            }
            self.keys.push(key.clone());
            self.nested(Segment::Key(key), |c| map.next_value_seed(c))?;
        }
        self.keys.truncate(first);
        Ok(())
    }
}

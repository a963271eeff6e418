//! Reading a large List on every core. One scan finds the items' boundaries and hands them out in
//! batches while it goes on; readers turn each batch into a partial [`Snapshot`], and the parts
//! are merged back in item order, so the result is the same as reading the items one by one.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{ItemType, Snapshot, SnapshotError};
use crate::input::without_position;

/// Items per batch: small enough to keep every reader busy, large enough to make the hand-over
/// cheap.
const BATCH_ITEMS: usize = 512;
/// Below this size a document is read on the calling thread alone.
const PARALLEL_MIN_BYTES: usize = 4 << 20;

/// The first item's index, the items, and their type when the List implies it.
type Batch<'a> = (usize, Vec<&'a RawValue>, Option<Arc<ItemType>>);
type Part = (usize, Result<Snapshot, SnapshotError>);

/// A List read: its objects, and the `metadata.continue` token of a page that has more.
pub(super) struct ListRead {
    pub snapshot: Snapshot,
    pub continue_token: Option<String>,
}

/// Reads a JSON document that is a `*List` with `items`; `Ok(None)` when it is anything else.
pub(super) fn read_list(document: usize, json: &str) -> Result<Option<ListRead>, SnapshotError> {
    let workers = if json.len() >= PARALLEL_MIN_BYTES {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) - 1
    } else {
        0
    };
    let (batches, queue) = channel::<Batch>();
    // The top-level key whose value could not be read, for the error's field path.
    let failed = std::cell::Cell::new(None);
    let queue = Mutex::new(queue);
    let (scanned, mut parts) = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..workers)
            .map(|_| scope.spawn(|| read_batches(document, &queue)))
            .collect();
        // The scan owns the sender, so the queue closes when the scan ends.
        let scanned = scan(json, batches, &failed);
        let mut parts = read_batches(document, &queue);
        for reader in readers {
            parts.extend(
                reader
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        (scanned, parts)
    });
    let (kind, has_items, continue_token) = scanned.map_err(|e| SnapshotError {
        path: failed.get().map(String::from),
        ..SnapshotError::in_document(
            document,
            format!("not a Kubernetes object: {}", without_position(&e)),
        )
    })?;
    if !(has_items && kind.is_some_and(|k| k.ends_with("List"))) {
        return Ok(None);
    }
    parts.sort_by_key(|(start, _)| *start);
    let mut snapshot = Snapshot::default();
    let parts = parts
        .into_iter()
        .map(|(_, part)| part)
        .collect::<Result<Vec<Snapshot>, SnapshotError>>()?;
    snapshot
        .nodes
        .reserve_exact(parts.iter().map(|p| p.nodes.len()).sum());
    snapshot
        .pods
        .reserve_exact(parts.iter().map(|p| p.pods.len()).sum());
    for part in parts {
        snapshot.append(part);
    }
    Ok(Some(ListRead {
        snapshot,
        continue_token: continue_token.filter(|t| !t.is_empty()),
    }))
}

fn read_batches(document: usize, queue: &Mutex<Receiver<Batch>>) -> Vec<Part> {
    let mut parts = Vec::new();
    loop {
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((start, items, implied)) = next else {
            return parts;
        };
        let mut part = Snapshot::default();
        let read = items.iter().enumerate().try_for_each(|(i, raw)| {
            part.add_object(document, Some(start + i), raw.get(), implied.as_deref())
        });
        parts.push((start, read.map(|()| part)));
    }
}

/// The document's `kind`, whether it has an `items` array (sending the items on as found) and
/// its `metadata.continue`.
type Scanned = (Option<String>, bool, Option<String>);

fn scan<'a>(
    json: &'a str,
    batches: Sender<Batch<'a>>,
    failed: &std::cell::Cell<Option<&'static str>>,
) -> serde_json::Result<Scanned> {
    let mut de = serde_json::Deserializer::from_str(json);
    let scanned = de.deserialize_map(Envelope { batches, failed })?;
    de.end()?;
    Ok(scanned)
}

struct Envelope<'a, 'f> {
    batches: Sender<Batch<'a>>,
    failed: &'f std::cell::Cell<Option<&'static str>>,
}

/// `metadata.continue` of a List page, read in the same scan as its items; any other value,
/// or metadata of another shape (an object's, or a malformed one the typed read reports), is
/// skipped without an error.
struct ContinueToken(Option<String>);

impl<'de> serde::Deserialize<'de> for ContinueToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ContinueVisitor)
    }
}

struct ContinueVisitor;

impl<'de> Visitor<'de> for ContinueVisitor {
    type Value = ContinueToken;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContinueToken, A::Error> {
        let mut token = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "continue" {
                token = map
                    .next_value::<serde_json::Value>()?
                    .as_str()
                    .map(str::to_string);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(ContinueToken(token))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ContinueToken, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ContinueToken(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }

    fn visit_unit<E>(self) -> Result<ContinueToken, E> {
        Ok(ContinueToken(None))
    }
}

impl<'de> Visitor<'de> for Envelope<'de, '_> {
    type Value = Scanned;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object or List")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut api_version, mut has_items) = (None::<String>, None::<String>, false);
        let mut continue_token = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "kind" => {
                    self.failed.set(Some("kind"));
                    kind = map.next_value()?;
                }
                "apiVersion" => {
                    self.failed.set(Some("apiVersion"));
                    api_version = map.next_value()?;
                }
                // An object's metadata need not read as a List's: only a List's is kept.
                "metadata" => {
                    self.failed.set(None);
                    continue_token = map.next_value::<ContinueToken>()?.0;
                }
                "items" if !has_items => {
                    // The API server's `NodeList` leaves `kind` out of its items; it comes
                    // before them, so the items' type is known by then.
                    let implied = match (kind.as_deref(), api_version.as_deref()) {
                        (Some(k), Some(v)) if k != "List" => k.strip_suffix("List").map(|item| {
                            Arc::new(ItemType {
                                api_version: v.to_string(),
                                kind: item.to_string(),
                            })
                        }),
                        _ => None,
                    };
                    self.failed.set(Some("items"));
                    has_items = map.next_value_seed(Items {
                        batches: &self.batches,
                        implied,
                    })?
                }
                _ => {
                    self.failed.set(None);
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        self.failed.set(None);
        Ok((kind, has_items, continue_token))
    }
}

/// `items`: an array (true) or null (false).
struct Items<'s, 'a> {
    batches: &'s Sender<Batch<'a>>,
    implied: Option<Arc<ItemType>>,
}

impl<'de> DeserializeSeed<'de> for Items<'_, 'de> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, 'de> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("`items` as an array of objects")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let (mut start, mut batch) = (0, Vec::with_capacity(BATCH_ITEMS));
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            batch.push(item);
            if batch.len() == BATCH_ITEMS {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_ITEMS));
                start += full.len();
                self.send(start - full.len(), full)?;
            }
        }
        if !batch.is_empty() {
            self.send(start, batch)?;
        }
        Ok(true)
    }
}

impl<'a> Items<'_, 'a> {
    fn send<E: serde::de::Error>(&self, start: usize, batch: Vec<&'a RawValue>) -> Result<(), E> {
        // Readers only stop when the queue closes, and the calling thread reads too.
        self.batches
            .send((start, batch, self.implied.clone()))
            .map_err(|_| E::custom("the snapshot readers stopped"))
    }
}

//! Node and Pod List pages as the API server encodes them in protobuf
//! (`application/vnd.kubernetes.protobuf`), which it writes several times faster than JSON.
//! Only the fields the model keeps are decoded (field numbers from k8s.io/api's
//! `generated.proto`); everything else is skipped by its length. The result equals what the JSON
//! form of the same objects reads as: Go's JSON omits empty non-pointer fields that protobuf
//! writes, so those read as absent here too, and times keep whole seconds as JSON prints them.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, Taint, Toleration,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;

use super::{CoreObject, Snapshot, SnapshotError};
use crate::api::core::{
    ClaimSource, Condition, Container, ContainerState, ContainerStatus, ContainerWaiting, Meta,
    Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Resources, Volume,
};

/// What every protobuf body of the API server starts with.
pub const MAGIC: &[u8] = b"k8s\0";
/// The media type to ask for, and that such an answer carries.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What a body that cannot be read was, and where.
#[derive(Debug, PartialEq)]
pub struct WireError {
    /// Byte offset from the start of the body.
    pub at: usize,
    pub what: String,
}

type Read<T> = Result<T, WireError>;

/// Reads a message's fields into `T`, one `apply` per field.
fn decode<'a, T: Default>(
    mut fields: Fields<'a>,
    mut apply: impl FnMut(&mut T, &Field<'a>) -> Read<()>,
) -> Read<T> {
    let mut value = T::default();
    while let Some(field) = fields.next()? {
        apply(&mut value, &field)?;
    }
    Ok(value)
}

/// A message read as a table: `fields!(bytes, |value: Type, field| { number => read, ... })`
/// reads the listed field numbers into a default `Type` and skips the others.
macro_rules! fields {
    ($fields:expr, |$value:ident: $type:ty, $field:ident| { $($number:pat => $read:expr),+ $(,)? }) => {
        decode($fields, |$value: &mut $type, $field| {
            match $field.number {
                $($number => {
                    $read;
                })+
                _ => {}
            }
            Ok(())
        })
    };
}

impl Snapshot {
    /// Adds one page of a `v1` NodeList or PodList in protobuf; `page` is 1-based for errors.
    /// Returns the page's `continue` token when the API server has more.
    pub fn add_protobuf_list(
        &mut self,
        page: usize,
        body: &[u8],
    ) -> Result<Option<String>, SnapshotError> {
        self.add_protobuf_stream(page, std::iter::once(body))
    }

    /// As [`Snapshot::add_protobuf_list`], reading the body in pieces as they arrive: each
    /// object is read as soon as it is whole, so the body is never held at once.
    pub fn add_protobuf_stream<B: AsRef<[u8]>>(
        &mut self,
        page: usize,
        pieces: impl Iterator<Item = B>,
    ) -> Result<Option<String>, SnapshotError> {
        let malformed = |e: WireError| {
            SnapshotError::in_document(
                page,
                format!(
                    "the API server's protobuf answer cannot be read at byte {}: {}",
                    e.at, e.what
                ),
            )
        };
        let mut body = Stream::new(pieces);
        let (api_version, kind, list_length) = body.open().map_err(malformed)?;
        let kind = match (api_version.as_str(), kind.as_str()) {
            ("v1", "NodeList") => ListKind::Node,
            ("v1", "PodList") => ListKind::Pod,
            _ => {
                let wrong = not_a("a v1 NodeList or PodList", &api_version, &kind);
                return Err(malformed(wrong));
            }
        };
        let end = body.offset() + list_length;
        let mut continue_token = None;
        let mut item = 0;
        while body.offset() < end {
            let (number, length) = body.field_head().map_err(malformed)?;
            if body.offset() + length > end {
                return Err(malformed(
                    body.error("an object runs past the end of its list"),
                ));
            }
            let fields = body.take(length).map_err(malformed)?;
            match number {
                1 => {
                    continue_token = list_continue_token(fields).map_err(malformed)?;
                    continue;
                }
                2 => {}
                _ => continue,
            }
            let object = match kind {
                ListKind::Node => node(fields).map(CoreObject::Node),
                ListKind::Pod => pod(fields).map(CoreObject::Pod),
            }
            .map_err(malformed)?;
            self.push_core(object)
                .map_err(|(object, path, message)| SnapshotError {
                    document: page,
                    item: Some(item),
                    object: Some(object),
                    path: Some(path),
                    message,
                })?;
            item += 1;
        }
        // What follows the list in the envelope (its content type) is not needed.
        Ok(continue_token)
    }
}

#[derive(Clone, Copy)]
enum ListKind {
    Node,
    Pod,
}

fn list_continue_token(meta: Fields) -> Read<Option<String>> {
    fields!(meta, |token: Option<String>, f| {
        3 => *token = Some(f.string()?).filter(|t| !t.is_empty()),
    })
}

/// A body read in pieces: bytes are kept from the first one not yet read to the end of the
/// pieces pulled so far.
struct Stream<I> {
    pieces: I,
    buffer: Vec<u8>,
    /// Read position in `buffer`.
    pos: usize,
    /// Body offset of `buffer[0]`.
    dropped: usize,
}

impl<B: AsRef<[u8]>, I: Iterator<Item = B>> Stream<I> {
    fn new(pieces: I) -> Stream<I> {
        Stream {
            pieces,
            buffer: Vec::new(),
            pos: 0,
            dropped: 0,
        }
    }

    fn offset(&self) -> usize {
        self.dropped + self.pos
    }

    fn error(&self, what: &str) -> WireError {
        WireError {
            at: self.offset(),
            what: what.into(),
        }
    }

    /// Makes `n` unread bytes available; false when the body ends first.
    fn fill(&mut self, n: usize) -> bool {
        while self.buffer.len() - self.pos < n {
            let Some(piece) = self.pieces.next() else {
                return false;
            };
            // Drop what was read before growing, so the buffer stays about one object long.
            if self.pos > 0 {
                self.buffer.drain(..self.pos);
                self.dropped += self.pos;
                self.pos = 0;
            }
            self.buffer.extend_from_slice(piece.as_ref());
        }
        true
    }

    fn varint(&mut self) -> Read<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            if !self.fill(1) {
                return Err(self.error("the data ends inside a number"));
            }
            let byte = self.buffer[self.pos];
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("a number runs past ten bytes"))
    }

    /// The next field's number and length, for the length-delimited fields an envelope and a
    /// List are made of.
    fn field_head(&mut self) -> Read<(u32, usize)> {
        let key = self.varint()?;
        if key & 7 != 2 {
            return Err(self.error(&format!("field {} of a list is not a message", key >> 3)));
        }
        let number = u32::try_from(key >> 3).map_err(|_| self.error("a field number too large"))?;
        let length =
            usize::try_from(self.varint()?).map_err(|_| self.error("a length too large"))?;
        Ok((number, length))
    }

    /// The next `length` bytes, as a message's fields.
    fn take(&mut self, length: usize) -> Read<Fields<'_>> {
        if !self.fill(length) {
            return Err(self.error("a length runs past the end of the data"));
        }
        let start = self.pos;
        self.pos += length;
        Ok(Fields::new(
            &self.buffer[start..start + length],
            self.dropped + start,
        ))
    }

    /// Reads the envelope (the magic, then a `runtime.Unknown`) up to its `raw` object: the
    /// object's apiVersion and kind, and its length.
    fn open(&mut self) -> Read<(String, String, usize)> {
        if !self.fill(MAGIC.len()) || &self.buffer[..MAGIC.len()] != MAGIC {
            return Err(WireError {
                at: 0,
                what: "it does not start as the API server's protobuf does (k8s\\0)".into(),
            });
        }
        self.pos = MAGIC.len();
        let mut type_meta = None;
        loop {
            let (number, length) = self.field_head()?;
            if number == 2 {
                let (api_version, kind) =
                    type_meta.ok_or_else(|| self.error("the object comes before its kind"))?;
                return Ok((api_version, kind, length));
            }
            let fields = self.take(length)?;
            if number == 1 {
                type_meta = Some(type_meta_of(fields)?);
            }
        }
    }
}

fn not_a(expected: &str, api_version: &str, kind: &str) -> WireError {
    WireError {
        at: 0,
        what: format!("it holds {api_version:?} {kind:?}, not {expected}"),
    }
}

/// A TypeMeta's apiVersion and kind.
fn type_meta_of(fields: Fields) -> Read<(String, String)> {
    fields!(fields, |t: (String, String), f| {
        1 => t.0 = f.string()?,
        2 => t.1 = f.string()?,
    })
}

/// What a failed request's `v1` Status says.
#[derive(Debug, Default, PartialEq)]
pub struct Status {
    pub message: String,
    pub reason: String,
    pub code: i32,
}

/// Reads the Status the API server answers a failed protobuf request with.
pub fn status(body: &[u8]) -> Read<Status> {
    let mut body = Stream::new(std::iter::once(body));
    let (api_version, kind, length) = body.open()?;
    if (api_version.as_str(), kind.as_str()) != ("v1", "Status") {
        return Err(not_a("a v1 Status", &api_version, &kind));
    }
    fields!(body.take(length)?, |s: Status, f| {
        3 => s.message = f.string()?,
        4 => s.reason = f.string()?,
        6 => s.code = f.int32()?,
    })
}

/// The fields of one protobuf message, in order.
#[derive(Clone)]
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Where `bytes` starts in the whole body, for errors.
    base: usize,
}

struct Field<'a> {
    number: u32,
    value: Value<'a>,
    at: usize,
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8], usize),
    Fixed,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Fields<'a> {
        Fields {
            bytes,
            pos: 0,
            base,
        }
    }

    fn error(&self, what: &str) -> WireError {
        WireError {
            at: self.base + self.pos,
            what: what.into(),
        }
    }

    fn varint(&mut self) -> Read<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(self.error("the data ends inside a number"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("a number runs past ten bytes"))
    }

    fn next(&mut self) -> Read<Option<Field<'a>>> {
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let at = self.base + self.pos;
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| self.error("a field number too large"))?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                if self.bytes.len() - self.pos < width {
                    return Err(self.error("the data ends inside a fixed-width number"));
                }
                self.pos += width;
                Value::Fixed
            }
            2 => {
                let length = self.varint()?;
                let start = self.pos;
                let end = usize::try_from(length)
                    .ok()
                    .and_then(|l| start.checked_add(l))
                    .filter(|&end| end <= self.bytes.len())
                    .ok_or_else(|| self.error("a length runs past the end of the data"))?;
                self.pos = end;
                Value::Bytes(&self.bytes[start..end], self.base + start)
            }
            wire => {
                return Err(WireError {
                    at,
                    what: format!(
                        "field {number} has wire type {wire}, which Kubernetes never writes"
                    ),
                });
            }
        };
        Ok(Some(Field { number, value, at }))
    }
}

impl<'a> Field<'a> {
    fn wrong(&self, expected: &str) -> WireError {
        WireError {
            at: self.at,
            what: format!("field {} is not {expected}", self.number),
        }
    }

    fn message(&self) -> Read<Fields<'a>> {
        match self.value {
            Value::Bytes(bytes, base) => Ok(Fields::new(bytes, base)),
            _ => Err(self.wrong("a message")),
        }
    }

    fn string(&self) -> Read<String> {
        match self.value {
            Value::Bytes(bytes, _) => std::str::from_utf8(bytes)
                .map(str::to_string)
                .map_err(|_| self.wrong("UTF-8 text")),
            _ => Err(self.wrong("text")),
        }
    }

    fn varint(&self) -> Read<u64> {
        match self.value {
            Value::Varint(v) => Ok(v),
            _ => Err(self.wrong("a number")),
        }
    }

    /// int32 and int64 are written as their 64-bit two's complement.
    fn int64(&self) -> Read<i64> {
        self.varint().map(|v| v as i64)
    }

    fn int32(&self) -> Read<i32> {
        i32::try_from(self.int64()?).map_err(|_| self.wrong("a 32-bit number"))
    }

    fn bool(&self) -> Read<bool> {
        self.varint().map(|v| v != 0)
    }

    /// A non-pointer Go string that JSON omits when empty.
    fn omitted_if_empty(&self) -> Read<Option<String>> {
        self.string().map(|s| Some(s).filter(|s| !s.is_empty()))
    }

    /// A `metav1.Time`; Go writes the zero time as an empty message, which JSON prints as null.
    fn time(&self) -> Read<Option<Timestamp>> {
        let fields = self.message()?;
        if fields.bytes.is_empty() {
            return Ok(None);
        }
        let seconds = fields!(fields, |seconds: i64, f| {
            1 => *seconds = f.int64()?,
        })?;
        Timestamp::from_second(seconds)
            .map(Some)
            .map_err(|_| self.wrong("a time"))
    }

    /// One `map<string, string>` entry.
    fn string_entry(&self) -> Read<(String, String)> {
        self.entry(|f| f.string())
    }

    /// One `map<string, Quantity>` entry.
    fn quantity_entry(&self) -> Read<(String, Quantity)> {
        self.entry(|f| {
            fields!(f.message()?, |q: Quantity, f| {
                1 => q.0 = f.string()?,
            })
        })
    }

    fn entry<V: Default>(&self, value: impl Fn(&Field<'a>) -> Read<V>) -> Read<(String, V)> {
        fields!(self.message()?, |entry: (String, V), f| {
            1 => entry.0 = f.string()?,
            2 => entry.1 = value(f)?,
        })
    }
}

/// A repeated field's items become `Some(list)`; JSON omits an empty list, so None stays None.
fn push_some<T>(list: &mut Option<Vec<T>>, item: T) {
    list.get_or_insert_with(Vec::new).push(item);
}

fn meta(fields: Fields) -> Read<Meta> {
    let (mut labels, mut annotations) = (Vec::new(), Vec::new());
    let mut meta = fields!(fields, |m: Meta, f| {
        1 => m.name = f.string()?,
        3 => m.namespace = f.string()?,
        5 => m.uid = f.string()?,
        8 => m.creation_timestamp = f.time()?,
        9 => m.deletion_timestamp = f.time()?,
        11 => labels.push(f.string_entry()?),
        12 => annotations.push(f.string_entry()?),
        13 => m.owner_references.push(owner_reference(f.message()?)?),
    })?;
    meta.labels = labels.into_iter().collect();
    meta.annotations = annotations.into_iter().collect();
    Ok(meta)
}

fn owner_reference(fields: Fields) -> Read<OwnerReference> {
    fields!(fields, |o: OwnerReference, f| {
        1 => o.kind = f.string()?,
        3 => o.name = f.string()?,
        4 => o.uid = f.string()?,
        5 => o.api_version = f.string()?,
        6 => o.controller = Some(f.bool()?),
        7 => o.block_owner_deletion = Some(f.bool()?),
    })
}

/// NodeCondition and PodCondition number the fields the model keeps alike.
fn condition(fields: Fields) -> Read<Condition> {
    fields!(fields, |c: Condition, f| {
        1 => c.type_ = f.string()?,
        2 => c.status = f.string()?,
        4 => c.last_transition_time = f.time()?,
        5 => c.reason = f.string()?,
        6 => c.message = f.string()?,
    })
}

fn node(fields: Fields) -> Read<Node> {
    fields!(fields, |n: Node, f| {
        1 => n.metadata = meta(f.message()?)?,
        2 => n.spec = node_spec(f.message()?)?,
        3 => n.status = node_status(f.message()?)?,
    })
}

fn node_spec(fields: Fields) -> Read<NodeSpec> {
    fields!(fields, |s: NodeSpec, f| {
        4 => s.unschedulable = f.bool()?,
        5 => s.taints.push(taint(f.message()?)?),
    })
}

fn taint(fields: Fields) -> Read<Taint> {
    fields!(fields, |t: Taint, f| {
        1 => t.key = f.string()?,
        2 => t.value = f.omitted_if_empty()?,
        3 => t.effect = f.string()?,
        4 => t.time_added = f.time()?.map(Time),
    })
}

fn node_status(fields: Fields) -> Read<NodeStatus> {
    let (mut capacity, mut allocatable) = (Vec::new(), Vec::new());
    let mut status = fields!(fields, |s: NodeStatus, f| {
        1 => capacity.push(f.quantity_entry()?),
        2 => allocatable.push(f.quantity_entry()?),
        4 => s.conditions.push(condition(f.message()?)?),
    })?;
    status.capacity = capacity.into_iter().collect();
    status.allocatable = allocatable.into_iter().collect();
    Ok(status)
}

fn pod(fields: Fields) -> Read<Pod> {
    fields!(fields, |p: Pod, f| {
        1 => p.metadata = meta(f.message()?)?,
        2 => p.spec = pod_spec(f.message()?)?,
        3 => p.status = pod_status(f.message()?)?,
    })
}

fn pod_spec(fields: Fields) -> Read<PodSpec> {
    let (mut node_selector, mut overhead) = (Vec::new(), Vec::new());
    let mut spec = fields!(fields, |s: PodSpec, f| {
        1 => s.volumes.push(volume(f.message()?)?),
        2 => s.containers.push(container(f.message()?)?),
        7 => node_selector.push(f.string_entry()?),
        10 => s.node_name = f.string()?,
        18 => s.affinity = Some(Box::new(affinity(f.message()?)?)),
        19 => s.scheduler_name = f.string()?,
        20 => s.init_containers.push(container(f.message()?)?),
        22 => s.tolerations.push(toleration(f.message()?)?),
        25 => s.priority = Some(f.int32()?),
        32 => overhead.push(f.quantity_entry()?),
        33 => s.topology_spread_constraints.push(spread_constraint(f.message()?)?),
    })?;
    spec.node_selector = node_selector.into_iter().collect();
    spec.overhead = overhead.into_iter().collect();
    Ok(spec)
}

fn volume(fields: Fields) -> Read<Volume> {
    fields!(fields, |v: Volume, f| {
        1 => v.name = f.string()?,
        // The volume source, inlined in JSON; only a claim is read.
        2 => v.persistent_volume_claim = claim_source(f.message()?)?,
    })
}

fn claim_source(fields: Fields) -> Read<Option<ClaimSource>> {
    fields!(fields, |claim: Option<ClaimSource>, f| {
        10 => *claim = Some(fields!(f.message()?, |c: ClaimSource, f| {
            1 => c.claim_name = f.string()?,
        })?),
    })
}

fn container(fields: Fields) -> Read<Container> {
    fields!(fields, |c: Container, f| {
        1 => c.name = f.string()?,
        8 => c.resources = resources(f.message()?)?,
        24 => c.restart_policy = f.string()?,
    })
}

fn resources(fields: Fields) -> Read<Resources> {
    type Entries = Vec<(String, Quantity)>;
    let (limits, requests) = fields!(fields, |lists: (Entries, Entries), f| {
        1 => lists.0.push(f.quantity_entry()?),
        2 => lists.1.push(f.quantity_entry()?),
    })?;
    Ok(Resources {
        limits: limits.into_iter().collect(),
        requests: requests.into_iter().collect(),
    })
}

fn toleration(fields: Fields) -> Read<Toleration> {
    fields!(fields, |t: Toleration, f| {
        1 => t.key = f.omitted_if_empty()?,
        2 => t.operator = f.omitted_if_empty()?,
        3 => t.value = f.omitted_if_empty()?,
        4 => t.effect = f.omitted_if_empty()?,
        5 => t.toleration_seconds = Some(f.int64()?),
    })
}

fn affinity(fields: Fields) -> Read<Affinity> {
    fields!(fields, |a: Affinity, f| {
        1 => a.node_affinity = Some(node_affinity(f.message()?)?),
        2 => {
            let (required, preferred) = pod_affinity(f.message()?)?;
            a.pod_affinity = Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: required,
                preferred_during_scheduling_ignored_during_execution: preferred,
            });
        },
        3 => {
            let (required, preferred) = pod_affinity(f.message()?)?;
            a.pod_anti_affinity = Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: required,
                preferred_during_scheduling_ignored_during_execution: preferred,
            });
        },
    })
}

fn node_affinity(fields: Fields) -> Read<NodeAffinity> {
    fields!(fields, |a: NodeAffinity, f| {
        1 => a.required_during_scheduling_ignored_during_execution =
            Some(fields!(f.message()?, |s: NodeSelector, f| {
                1 => s.node_selector_terms.push(node_selector_term(f.message()?)?),
            })?),
        2 => push_some(
            &mut a.preferred_during_scheduling_ignored_during_execution,
            fields!(f.message()?, |t: PreferredSchedulingTerm, f| {
                1 => t.weight = f.int32()?,
                2 => t.preference = node_selector_term(f.message()?)?,
            })?,
        ),
    })
}

fn node_selector_term(fields: Fields) -> Read<NodeSelectorTerm> {
    fields!(fields, |t: NodeSelectorTerm, f| {
        1 => push_some(&mut t.match_expressions, node_requirement(f.message()?)?),
        2 => push_some(&mut t.match_fields, node_requirement(f.message()?)?),
    })
}

fn node_requirement(fields: Fields) -> Read<NodeSelectorRequirement> {
    fields!(fields, |r: NodeSelectorRequirement, f| {
        1 => r.key = f.string()?,
        2 => r.operator = f.string()?,
        3 => push_some(&mut r.values, f.string()?),
    })
}

/// PodAffinity and PodAntiAffinity have the same fields: required terms, preferred terms.
type AffinityTerms = (
    Option<Vec<PodAffinityTerm>>,
    Option<Vec<WeightedPodAffinityTerm>>,
);

fn pod_affinity(fields: Fields) -> Read<AffinityTerms> {
    fields!(fields, |terms: AffinityTerms, f| {
        1 => push_some(&mut terms.0, pod_affinity_term(f.message()?)?),
        2 => push_some(
            &mut terms.1,
            fields!(f.message()?, |w: WeightedPodAffinityTerm, f| {
                1 => w.weight = f.int32()?,
                2 => w.pod_affinity_term = pod_affinity_term(f.message()?)?,
            })?,
        ),
    })
}

fn pod_affinity_term(fields: Fields) -> Read<PodAffinityTerm> {
    fields!(fields, |t: PodAffinityTerm, f| {
        1 => t.label_selector = Some(label_selector(f.message()?)?),
        2 => push_some(&mut t.namespaces, f.string()?),
        3 => t.topology_key = f.string()?,
        4 => t.namespace_selector = Some(label_selector(f.message()?)?),
        5 => push_some(&mut t.match_label_keys, f.string()?),
        6 => push_some(&mut t.mismatch_label_keys, f.string()?),
    })
}

fn label_selector(fields: Fields) -> Read<LabelSelector> {
    fields!(fields, |s: LabelSelector, f| {
        1 => {
            let (key, value) = f.string_entry()?;
            s.match_labels.get_or_insert_default().insert(key, value);
        },
        2 => push_some(
            &mut s.match_expressions,
            fields!(f.message()?, |r: LabelSelectorRequirement, f| {
                1 => r.key = f.string()?,
                2 => r.operator = f.string()?,
                3 => push_some(&mut r.values, f.string()?),
            })?,
        ),
    })
}

fn spread_constraint(fields: Fields) -> Read<TopologySpreadConstraint> {
    fields!(fields, |c: TopologySpreadConstraint, f| {
        1 => c.max_skew = f.int32()?,
        2 => c.topology_key = f.string()?,
        3 => c.when_unsatisfiable = f.string()?,
        4 => c.label_selector = Some(label_selector(f.message()?)?),
        5 => c.min_domains = Some(f.int32()?),
        6 => c.node_affinity_policy = Some(f.string()?),
        7 => c.node_taints_policy = Some(f.string()?),
        8 => push_some(&mut c.match_label_keys, f.string()?),
    })
}

fn pod_status(fields: Fields) -> Read<PodStatus> {
    fields!(fields, |s: PodStatus, f| {
        1 => s.phase = f.string()?,
        2 => s.conditions.push(condition(f.message()?)?),
        7 => s.start_time = f.time()?,
        8 => s.container_statuses.push(container_status(f.message()?)?),
    })
}

fn container_status(fields: Fields) -> Read<ContainerStatus> {
    fields!(fields, |c: ContainerStatus, f| {
        1 => c.name = f.string()?,
        2 => c.state = fields!(f.message()?, |s: ContainerState, f| {
            1 => s.waiting = Some(fields!(f.message()?, |w: ContainerWaiting, f| {
                1 => w.reason = f.string()?,
            })?),
        })?,
        5 => c.restart_count = f.int32()?,
    })
}

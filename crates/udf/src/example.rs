//! `parse_example`: serialized `tf.train.Example` protos into Arrow columns, a whole chunk at
//! a time (tf.data's batched `parse_example`, which the per-element form vectorizes to).
//!
//! The protobuf wire format is read directly: the `Features` map's entries are matched
//! against the requested features by key, and each value list (packed or not) is appended to
//! that feature's flat value buffer. There are no per-record maps or message objects, and
//! unknown fields and unrequested features are skipped unread.
//!
//! - A fixed-length feature (`FixedLenFeature`) must have exactly as many values as its shape
//!   holds; when it is missing, its default is used, or, without a default, the record is an
//!   error. A scalar becomes a plain column; a shape becomes (nested) fixed-size lists.
//! - A variable-length feature (`VarLenFeature`) becomes a list column (shape `[-1]`), empty
//!   where missing; tf.data gives it as a sparse tensor.
//! - A feature of another type than asked, a wrong value count, or a malformed proto is an
//!   error naming the record (its row in the chunk) and the feature.
//!
//! Records come as a `Binary` column, or as a `BinaryView` column viewing them where a
//! TFRecord reader read them (an interleave gathers such views without copying the bytes).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayBuilder, ArrayRef, AsArray, BinaryArray, BinaryBuilder, BinaryViewArray, ByteView, FixedSizeListArray,
    Float32Array, Int64Array, ListArray, UInt32Array,
};
use arrow::buffer::{MutableBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Int64Type};
pub use flumen_ir::example::{output_spec, Defaults, FeatureKind, FeatureSpec};
use flumen_ir::DType;

use crate::short_varints;

/// The values of one feature of an `Example` to serialize.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FeatureValues<'a> {
    /// An `Int64List`.
    Int64(&'a [i64]),
    /// A `FloatList`.
    Float32(&'a [f32]),
    /// A `BytesList`.
    Bytes(&'a [&'a [u8]]),
}

/// Appends a length-delimited field (wire type 2) numbered `field` holding `bytes`.
fn put_delimited(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push((field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A serialized `tf.train.Example` holding `features` in the order given, numeric lists
/// packed, as TensorFlow writes them: what [`parse_examples`] reads and tf.data's
/// `parse_example` too. With `TfRecordWriter`, it writes datasets for either engine.
pub fn serialize_example(features: &[(&str, FeatureValues)]) -> Vec<u8> {
    let mut map = Vec::new();
    for (key, values) in features {
        let mut list = Vec::new();
        let (kind, packed) = match values {
            FeatureValues::Int64(v) => {
                let mut packed = Vec::new();
                v.iter().for_each(|x| put_varint(&mut packed, *x as u64));
                (3, packed)
            }
            FeatureValues::Float32(v) => (2, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            FeatureValues::Bytes(v) => {
                v.iter().for_each(|b| put_delimited(&mut list, 1, b));
                (1, Vec::new())
            }
        };
        if kind != 1 {
            put_delimited(&mut list, 1, &packed);
        }
        let mut feature = Vec::new();
        put_delimited(&mut feature, kind, &list);
        let mut entry = Vec::new();
        put_delimited(&mut entry, 1, key.as_bytes());
        put_delimited(&mut entry, 2, &feature);
        put_delimited(&mut map, 1, &entry);
    }
    let mut example = Vec::new();
    put_delimited(&mut example, 1, &map);
    example
}

/// A parse failure: the record's row and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// The record's row in the chunk.
    pub row: usize,
    /// What is wrong, naming the feature where there is one.
    pub message: String,
}

/// Why a record does not parse, boxed so that the parser's results stay two words wide
/// (returned in registers on the hot path, where the error never happens).
#[derive(Debug)]
#[allow(clippy::box_collection)] // One pointer wide on purpose: a `String` is three.
struct Bad(Box<String>);

impl From<&str> for Bad {
    fn from(message: &str) -> Self {
        Bad(Box::new(message.to_string()))
    }
}

impl From<String> for Bad {
    fn from(message: String) -> Self {
        Bad(Box::new(message))
    }
}

/// Values of one feature across the chunk.
enum Values {
    Int64(Vec<i64>),
    /// Native floats as bytes, so that a packed `FloatList` (little-endian floats on the
    /// wire) is appended with one copy on little-endian targets.
    Float32(MutableBuffer),
    Bytes(BinaryBuilder),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Int64(v) => v.len(),
            Values::Float32(v) => v.len() / 4,
            Values::Bytes(b) => ArrayBuilder::len(b),
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            Values::Int64(v) => v.truncate(n),
            Values::Float32(v) => v.truncate(n * 4),
            // Only reached for a feature listed twice in one record, which protobuf resolves
            // to the last: rebuild without the first listing's values.
            Values::Bytes(b) => {
                let old = b.finish();
                for i in 0..n {
                    b.append_value(old.value(i));
                }
            }
        }
    }
}

/// One requested feature while parsing: its values and, per record, where they end.
struct Column<'a> {
    spec: &'a FeatureSpec,
    /// The values a fixed-length feature holds per record (its shape's product), checked
    /// per record.
    per_record: usize,
    /// For a fixed-length feature, its default (`Some(None)` when it is required); `None`
    /// for a variable-length one.
    fixed: Option<Option<&'a Defaults>>,
    values: Values,
    /// Where each record's values end, from 0, in a variable-length column. A fixed-length
    /// one's records each hold `per_record` values (a record that does not is an error), so
    /// it keeps none (pushing them, and reaching the feature's kind through its spec, took
    /// a w2 chunk's parse from 168 to 192 µs).
    offsets: Vec<i32>,
    /// The record in which this feature was last seen.
    seen: Option<usize>,
}

impl Column<'_> {
    /// Where record `row`'s values start.
    #[inline]
    fn start(&self, row: usize) -> usize {
        match self.fixed {
            Some(_) => row * self.per_record,
            None => *self.offsets.last().expect("offsets start with 0") as usize,
        }
    }
}

/// A cursor over one protobuf message: bytes `at..end` of `bytes`, which may go on past
/// `end` (the chunk's other records, or a reader's window), so that the common field header
/// is read with one 8-byte load even near the message's end.
#[derive(Clone, Copy)]
struct Wire<'a> {
    bytes: &'a [u8],
    at: usize,
    end: usize,
}

/// A field of a message.
enum WireField<'a> {
    /// A length-delimited field (a message, a string or a packed list): its number and
    /// contents.
    Delimited(u64, Wire<'a>),
    /// Another field: its number and wire type, with the cursor before its value.
    Other(u64, u8),
}

impl<'a> Wire<'a> {
    #[cfg(test)]
    fn new(bytes: &'a [u8]) -> Self {
        Wire { bytes, at: 0, end: bytes.len() }
    }

    #[inline]
    fn done(&self) -> bool {
        self.at >= self.end
    }

    /// The unread bytes.
    #[inline]
    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..self.end]
    }

    /// The next varint. Field keys and the lengths of short messages are one byte, and they
    /// are most of what a parse reads, so that case is decided before the loop.
    #[inline]
    fn varint(&mut self) -> Result<u64, Bad> {
        match self.bytes.get(self.at) {
            Some(&byte) if byte < 0x80 && self.at < self.end => {
                self.at += 1;
                Ok(u64::from(byte))
            }
            _ => self.long_varint(),
        }
    }

    /// A varint of more than one byte: two bytes (the lengths of lists of tens of values)
    /// without the loop.
    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64, Bad> {
        if let Some(&[b0, b1]) = self.rest().get(..2) {
            if b1 < 0x80 {
                self.at += 2;
                return Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7);
            }
        }
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.rest().first().ok_or("a varint runs past the end")?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint is longer than 10 bytes".into())
    }

    /// The next `n` bytes, as a cursor over them.
    #[inline]
    fn take(&mut self, n: usize) -> Result<Wire<'a>, Bad> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.end).ok_or("a field runs past the end")?;
        let out = Wire { bytes: self.bytes, at: self.at, end };
        self.at = end;
        Ok(out)
    }

    #[inline]
    fn delimited(&mut self) -> Result<Wire<'a>, Bad> {
        let n = usize::try_from(self.varint()?).map_err(|_| "a length does not fit in memory")?;
        self.take(n)
    }

    /// The next field. A one-byte key of a length-delimited field with a length of one or
    /// two bytes (every message and list header of an `Example` under 16 KiB) is decoded
    /// from one load, where reading the key and then each length byte made each field wait
    /// for a chain of loads (7% of a w2 chunk's parse).
    #[inline(always)]
    fn field(&mut self) -> Result<WireField<'a>, Bad> {
        if let Some(word) = self.bytes.get(self.at..self.at + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            let (key, b1, b2) = (word as u8, (word >> 8) as u8, (word >> 16) as u8);
            if key & 0x87 == 2 && (b1 < 0x80 || b2 < 0x80) {
                let (len, header) = match b1 < 0x80 {
                    true => (usize::from(b1), 2),
                    false => (usize::from(b1 & 0x7f) | usize::from(b2) << 7, 3),
                };
                self.at += header;
                return Ok(WireField::Delimited(u64::from(key >> 3), self.take(len)?));
            }
        }
        let key = self.varint()?;
        let (number, wire_type) = (key >> 3, (key & 7) as u8);
        match wire_type {
            2 => Ok(WireField::Delimited(number, self.delimited()?)),
            _ => Ok(WireField::Other(number, wire_type)),
        }
    }

    /// The contents of the next length-delimited field numbered `number`, skipping the
    /// fields before it; `None` at the message's end.
    ///
    /// Always inlined, as are [`feed`] and [`append_feature`]: as calls, their
    /// `Result<Option<Wire>>` came back through memory, and the caller's 16-byte reload of
    /// the callee's 8-byte stores could not be forwarded from them, a stall per field
    /// (`cargo bench --bench tfrecord -- "w6 token lists"`: flumen 13% faster inlined).
    #[inline(always)]
    fn next_delimited(&mut self, number: u64) -> Result<Option<Wire<'a>>, Bad> {
        while !self.done() {
            match self.field()? {
                WireField::Delimited(n, contents) if n == number => return Ok(Some(contents)),
                WireField::Delimited(..) => {}
                WireField::Other(_, wire_type) => self.skip(wire_type)?,
            }
        }
        Ok(None)
    }

    /// Skips the value of a field of `wire_type` (not length-delimited) whose key was read.
    fn skip(&mut self, wire_type: u8) -> Result<(), Bad> {
        match wire_type {
            0 => self.varint().map(drop),
            1 => self.take(8).map(drop),
            5 => self.take(4).map(drop),
            t => Err(format!("unsupported wire type {t}").into()),
        }
    }
}

/// The feature list's type, as its field number in `Feature` says.
fn list_type(field: u64) -> Option<DType> {
    match field {
        1 => Some(DType::Binary),
        2 => Some(DType::Float32),
        3 => Some(DType::Int64),
        _ => None,
    }
}

fn type_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Binary => "bytes",
        DType::Float32 => "float",
        _ => "int64",
    }
}

/// Appends the values of a `BytesList`, `FloatList` or `Int64List` message. Returns the
/// list's one field when it has only one, a packed list or a single string (what
/// [`Region::Value`] reads again).
fn append_list<'a>(mut wire: Wire<'a>, values: &mut Values) -> Result<Option<Wire<'a>>, Bad> {
    let (mut only, mut fields) = (None, 0);
    while !wire.done() {
        fields += 1;
        match (wire.field()?, &mut *values) {
            (WireField::Delimited(1, value), values) => {
                append_value(value.rest(), values)?;
                only = Some(value);
            }
            (WireField::Other(1, 5), Values::Float32(v)) => {
                v.push(f32::from_le_bytes(wire.take(4)?.rest().try_into().expect("4 bytes")))
            }
            (WireField::Other(1, 0), Values::Int64(v)) => v.push(wire.varint()? as i64),
            (WireField::Other(1, t), _) => return Err(format!("a list value has wire type {t}").into()),
            (WireField::Delimited(..), _) => {}
            (WireField::Other(_, t), _) => wire.skip(t)?,
        }
    }
    Ok(only.filter(|_| fields == 1))
}

/// Appends a length-delimited list value: a string, or packed floats or varints.
#[inline]
fn append_value(value: &[u8], values: &mut Values) -> Result<(), Bad> {
    match values {
        Values::Bytes(out) => out.append_value(value),
        // One value, a scalar feature's (three of w2's four): pushed, where a copy of its
        // bytes was a library call and a packed list's decode a call of its own.
        Values::Float32(v) if value.len() == 4 => v.push(f32::from_le_bytes(value.try_into().expect("4 bytes"))),
        Values::Int64(v) if value.len() == 1 && value[0] < 0x80 => v.push(i64::from(value[0])),
        Values::Float32(v) => {
            if !value.len().is_multiple_of(4) {
                return Err("a packed float list is not a multiple of 4 bytes".into());
            }
            if cfg!(target_endian = "little") {
                v.extend_from_slice(value);
            } else {
                value.chunks_exact(4).for_each(|c| v.push(f32::from_le_bytes(c.try_into().expect("4 bytes"))));
            }
        }
        Values::Int64(v) => packed_varints(value, v)?,
    }
    Ok(())
}

/// Appends the varints of a packed list to `out`.
///
/// Runs of values of 1 to 3 bytes go four at a time through [`short_varints::decode`].
/// Between runs, and where fewer than 16 bytes remain, values are decoded one at a time,
/// eight bytes at a time while eight remain: the first byte without a continuation bit ends
/// the value, and its 7-bit groups are gathered without a loop (the common 1 to 8 byte
/// values). The rest go through [`Wire::varint`].
fn packed_varints(bytes: &[u8], out: &mut Vec<i64>) -> Result<(), Bad> {
    // At most one value per byte: room for the runs, which decode only into reserved room.
    out.reserve(bytes.len());
    let mut at = 0;
    while at + 8 <= bytes.len() {
        at = short_varints::decode(bytes, at, out);
        if at + 8 > bytes.len() {
            break;
        }
        let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let ends = !word & 0x8080_8080_8080_8080;
        if ends == 0 {
            break;
        }
        let len = ends.trailing_zeros() as usize / 8 + 1;
        let kept = if len == 8 { word } else { word & ((1u64 << (8 * len)) - 1) };
        let mut x = kept & 0x7f7f_7f7f_7f7f_7f7f;
        x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
        x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
        out.push(x as i64);
        at += len;
    }
    let mut rest = Wire { bytes, at, end: bytes.len() };
    while !rest.done() {
        out.push(rest.varint()? as i64);
    }
    Ok(())
}

/// Parses one `Feature` message into `column`. Returns the one value field of its list
/// when the message is one list holding one field.
#[inline(always)]
fn append_feature<'a>(mut wire: Wire<'a>, column: &mut Column) -> Result<Option<Wire<'a>>, Bad> {
    let (mut only, mut fields) = (None, 0);
    while !wire.done() {
        fields += 1;
        let list = match wire.field()? {
            WireField::Delimited(number, list) => match list_type(number) {
                Some(found) => (found, list),
                None => continue,
            },
            WireField::Other(_, wire_type) => {
                wire.skip(wire_type)?;
                continue;
            }
        };
        if list.0 != column.spec.dtype {
            return Err(format!(
                "feature '{}' is {}, expected {}",
                column.spec.name,
                type_name(list.0),
                type_name(column.spec.dtype)
            )
            .into());
        }
        only = append_list(list.1, &mut column.values)?;
    }
    Ok(only.filter(|_| fields == 1))
}

/// The requested keys, each with the columns that read it, and per entry position of the
/// `Features` map the key found there in the last record. Examples written by one program
/// list their features in the same order, so the guess is checked with one comparison
/// instead of a search through the keys.
struct Keys {
    names: Vec<(Vec<u8>, Vec<usize>)>,
    guesses: Vec<usize>,
}

impl Keys {
    fn of(columns: &[FeatureSpec]) -> Keys {
        let mut names: Vec<(Vec<u8>, Vec<usize>)> = Vec::new();
        for (c, spec) in columns.iter().enumerate() {
            match names.iter_mut().find(|(name, _)| name.as_slice() == spec.name.as_bytes()) {
                Some((_, readers)) => readers.push(c),
                None => names.push((spec.name.as_bytes().to_vec(), vec![c])),
            }
        }
        Keys { names, guesses: Vec::new() }
    }

    /// The requested key equal to `key`, the entry at `position` of its record.
    #[inline]
    fn find(&mut self, position: usize, key: &[u8]) -> Option<usize> {
        if let Some(&guess) = self.guesses.get(position) {
            if self.names.get(guess).is_some_and(|(name, _)| same(name, key)) {
                return Some(guess);
            }
        }
        let found = self.names.iter().position(|(name, _)| same(name, key));
        let guess = found.unwrap_or(usize::MAX);
        // Entries are looked up in order, so a position is at most one past the known ones.
        if position < self.guesses.len() {
            self.guesses[position] = guess;
        } else {
            self.guesses.push(guess);
        }
        found
    }
}

/// Byte-string equality, compared in line a word at a time (feature keys and the stretches
/// of a record's layout are short, and a library call or a loop per byte cost more than the
/// comparison).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    match n {
        // The last word overlaps the one before it where `n` is not a multiple of 8.
        8.. => (0..n / 8).all(|k| word(a, 8 * k) == word(b, 8 * k)) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a.iter().zip(b).all(|(x, y)| x == y),
    }
}

/// The layout of the last record walked in full: its bytes, and where the value of each
/// requested feature sat in it (the key's index in `Keys`, and the value's start and end
/// in the record), in record order. A record whose bytes outside those values are the same
/// (every key, length and unrequested field) parses the same way, so its values are read
/// where the last record's were, without walking the `Example` again: records written by
/// one program differ mostly in their values (all of w2's share one layout), and the walk,
/// a chain of loads each waiting for the length before it, was 40% of a w2 chunk's parse.
#[derive(Default)]
struct Shape {
    /// Whether `bytes` and `values` describe a record (one that parsed, listing no key
    /// twice).
    known: bool,
    bytes: Vec<u8>,
    values: Vec<Region>,
    /// Records in a row whose layout differed from the one before: past a few, the chunk's
    /// layouts vary and are no longer recorded.
    misses: u32,
}

/// Where a requested feature's values sit in a record, from its start.
#[derive(Debug, Clone, Copy)]
enum Region {
    /// A `Feature` message of the requested key `Feature.0` (its index in `Keys`), parsed as
    /// such.
    Feature(usize, usize, usize),
    /// The one field of the one list of a `Feature` read by one column, `Value.0`: packed
    /// values or a string, appended as they are (the headers around them belong to the
    /// layout).
    Value(usize, usize, usize),
}

impl Region {
    fn bounds(self) -> (usize, usize) {
        match self {
            Region::Feature(_, start, end) | Region::Value(_, start, end) => (start, end),
        }
    }
}

/// Consecutive layout misses after which a chunk's records are only walked.
const SHAPE_MISSES: u32 = 8;

impl Shape {
    /// Whether `record` has the known layout.
    #[inline]
    fn fits(&self, record: &[u8]) -> bool {
        if !self.known || record.len() != self.bytes.len() {
            return false;
        }
        let mut from = 0;
        for (start, end) in self.values.iter().map(|region| region.bounds()) {
            if !same(&record[from..start], &self.bytes[from..start]) {
                return false;
            }
            from = end;
        }
        same(&record[from..], &self.bytes[from..])
    }
}

/// Appends `value`, the value of the requested key `found` in record `row`, to the columns
/// that read that key (a sparse feature's index and a feature of its own may share one).
/// Returns whether the key was listed before in the record, and, when one column reads
/// them from one field, that column and where the values are ([`Region::Value`]).
#[inline(always)]
fn feed<'a>(
    found: usize,
    value: Wire<'a>,
    row: usize,
    columns: &mut [Column],
    keys: &Keys,
) -> Result<(bool, Option<(usize, Wire<'a>)>), Bad> {
    let (mut again, mut only) = (false, None);
    let readers = &keys.names[found].1;
    for &c in readers {
        let column = &mut columns[c];
        // A key listed twice: protobuf keeps the last value.
        if column.seen == Some(row) {
            column.values.truncate(column.start(row));
            again = true;
        }
        column.seen = Some(row);
        only = append_feature(value, column)?.map(|wire| (c, wire));
    }
    Ok((again, only.filter(|_| readers.len() == 1)))
}

/// Walks one serialized `Example` (record `row`), appending the requested features' values,
/// and records its layout in `shape`.
fn walk(record: Wire, row: usize, columns: &mut [Column], keys: &mut Keys, shape: &mut Shape) -> Result<(), Bad> {
    shape.known = false;
    shape.values.clear();
    let mut again = false;
    let mut example = record;
    let mut position = 0;
    while let Some(mut features) = example.next_delimited(1)? {
        while let Some(mut entry) = features.next_delimited(1)? {
            let (mut key, mut value) = (None, None);
            while !entry.done() {
                match entry.field()? {
                    WireField::Delimited(1, k) => key = Some(k.rest()),
                    WireField::Delimited(2, v) => value = Some(v),
                    WireField::Delimited(..) => {}
                    WireField::Other(_, t) => entry.skip(t)?,
                }
            }
            let Some(key) = key else { continue };
            let found = keys.find(position, key);
            position += 1;
            let Some(found) = found else { continue };
            // A key without a value is an empty value, at the entry's end.
            let value = value.unwrap_or(Wire { at: entry.end, ..entry });
            let (listed, only) = feed(found, value, row, columns, keys)?;
            again |= listed;
            let region = match only {
                Some((column, only)) => Region::Value(column, only.at - record.at, only.end - record.at),
                None => Region::Feature(found, value.at - record.at, value.end - record.at),
            };
            shape.values.push(region);
        }
    }
    if !again && shape.misses < SHAPE_MISSES {
        shape.bytes.clear();
        shape.bytes.extend_from_slice(record.rest());
        shape.known = true;
    }
    Ok(())
}

/// Parses one serialized `Example` (record `row`) into the columns, then checks the record's
/// `sparse` features.
fn parse_record(
    record: Wire,
    row: usize,
    columns: &mut [Column],
    keys: &mut Keys,
    sparse: &[Sparse],
    shape: &mut Shape,
) -> Result<(), Bad> {
    if shape.fits(record.rest()) {
        shape.misses = 0;
        for &region in &shape.values {
            match region {
                Region::Value(column, start, end) => {
                    let column = &mut columns[column];
                    column.seen = Some(row);
                    append_value(&record.bytes[record.at + start..record.at + end], &mut column.values)?;
                }
                Region::Feature(found, start, end) => {
                    let value = Wire { bytes: record.bytes, at: record.at + start, end: record.at + end };
                    feed(found, value, row, columns, keys)?;
                }
            }
        }
    } else {
        shape.misses += u32::from(shape.known);
        walk(record, row, columns, keys, shape)?;
    }
    for column in columns.iter_mut() {
        match column.fixed {
            Some(_) if column.seen == Some(row) => {
                let (count, want) = (column.values.len() - column.start(row), column.per_record);
                if count != want {
                    let name = &column.spec.name;
                    return Err(format!("feature '{name}' has {count} values, its shape holds {want}").into());
                }
            }
            Some(Some(default)) => append_default(default, &mut column.values),
            Some(None) => return Err(format!("required feature '{}' is missing", column.spec.name).into()),
            None => {
                let end = i32::try_from(column.values.len()).map_err(|_| "more than 2^31 values in one chunk")?;
                column.offsets.push(end);
            }
        }
    }
    for sparse in sparse {
        sparse.check(columns)?;
    }
    Ok(())
}

fn append_default(default: &Defaults, values: &mut Values) {
    match (default, values) {
        (Defaults::Int64(d), Values::Int64(v)) => v.extend_from_slice(d),
        (Defaults::Float32(d), Values::Float32(v)) => v.extend_from_slice(d),
        (Defaults::Bytes(d), Values::Bytes(b)) => d.iter().for_each(|x| b.append_value(x)),
        // `output_spec` checked that defaults have their feature's type.
        _ => unreachable!("a default of another type than its feature"),
    }
}

/// Records ahead of the one parsed whose bytes are asked into the cache. A reader's thread
/// checked them, so they reach the parsing core from the shared cache or from memory, and
/// the first look at each record (`Shape::fits`) waited for them: 15% of a w2 pass. Asked
/// for four records ahead, w2 ran 6–8% faster (8 ahead: the same).
const AHEAD: usize = 4;

/// Asks the cache lines of `bytes` (up to 512 bytes of them) into the cache.
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64).take(8) {
        // SAFETY: a prefetch only hints the cache; it reads nothing and never faults.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// The serialized records of a chunk.
enum Records<'a> {
    /// In one values buffer.
    Contiguous(&'a BinaryArray),
    /// Anywhere in the array's data buffers.
    Views(&'a BinaryViewArray),
}

impl<'a> Records<'a> {
    fn of(array: &'a dyn Array) -> Result<Self, ParseError> {
        match array.data_type() {
            DataType::Binary => Ok(Records::Contiguous(array.as_binary())),
            DataType::BinaryView => Ok(Records::Views(array.as_binary_view())),
            other => Err(ParseError { row: 0, message: format!("the records are {other}, not bytes") }),
        }
    }

    fn array(&self) -> &'a dyn Array {
        match self {
            Records::Contiguous(a) => *a,
            Records::Views(a) => *a,
        }
    }

    /// The bytes of all records together.
    fn bytes(&self) -> usize {
        match self {
            Records::Contiguous(a) => {
                let offsets = a.value_offsets();
                (offsets[offsets.len() - 1] - offsets[0]) as usize
            }
            Records::Views(a) => a.views().iter().map(|&v| v as u32 as usize).sum(),
        }
    }

    /// Record `row`, within the buffer that holds it (see [`Wire`]).
    #[inline]
    fn wire(&self, row: usize) -> Wire<'a> {
        match self {
            Records::Contiguous(a) => {
                let offsets = a.value_offsets();
                Wire { bytes: a.value_data(), at: offsets[row] as usize, end: offsets[row + 1] as usize }
            }
            Records::Views(a) => {
                let view = ByteView::from(a.views()[row]);
                // A record of up to 12 bytes is held in its view itself.
                if view.length <= 12 {
                    return Wire { bytes: a.value(row), at: 0, end: view.length as usize };
                }
                let at = view.offset as usize;
                Wire { bytes: &a.data_buffers()[view.buffer_index as usize], at, end: at + view.length as usize }
            }
        }
    }
}

/// Parses every record of `records`, a `Binary` or `BinaryView` column (null records are
/// errors), into one column per feature, as [`output_spec`] describes them. Stops at the
/// first bad record.
pub fn parse_examples(records: &dyn Array, features: &[FeatureSpec]) -> Result<Vec<ArrayRef>, ParseError> {
    let records = Records::of(records)?;
    let rows = records.array().len();
    let layout = Layout::of(features);
    let mut keys = Keys::of(&layout.columns);
    let mut columns: Vec<Column> = layout
        .columns
        .iter()
        .map(|spec| {
            let fixed = match &spec.kind {
                FeatureKind::FixedLen { default, .. } => Some(default.as_ref()),
                _ => None,
            };
            // One end per record: grown by doubling, it was copied a dozen times a chunk.
            let mut offsets = Vec::with_capacity(if fixed.is_some() { 0 } else { rows + 1 });
            if fixed.is_none() {
                offsets.push(0);
            }
            Column {
                spec,
                per_record: spec.values_per_record(),
                fixed,
                values: match spec.dtype {
                    DType::Int64 => Values::Int64(Vec::with_capacity(capacity(spec, &records))),
                    DType::Float32 => Values::Float32(MutableBuffer::with_capacity(capacity(spec, &records) * 4)),
                    _ => Values::Bytes(BinaryBuilder::with_capacity(rows, 0)),
                },
                offsets,
                seen: None,
            }
        })
        .collect();
    let mut shape = Shape::default();
    let nulls = records.array().nulls();
    for row in 0..rows {
        if nulls.is_some_and(|n| n.is_null(row)) {
            return Err(ParseError { row, message: "the record is null".into() });
        }
        if row + AHEAD < rows {
            prefetch(records.wire(row + AHEAD).rest());
        }
        let record = records.wire(row);
        parse_record(record, row, &mut columns, &mut keys, &layout.sparse, &mut shape)
            .map_err(|Bad(message)| ParseError { row, message: *message })?;
    }
    let parsed: Vec<ArrayRef> = columns.into_iter().map(finish).collect();
    Ok(layout.outputs.iter().map(|out| out.array(&parsed, &layout.sparse)).collect())
}

/// What a parse reads and builds for a list of features: the columns filled from the
/// records (one per fixed- or variable-length feature, and for each sparse feature a
/// variable-length one per index key and its value key, shared where keys and types agree),
/// and each output from them.
struct Layout {
    columns: Vec<FeatureSpec>,
    sparse: Vec<Sparse>,
    outputs: Vec<Output>,
}

/// An output feature: a parsed column as is, or a sparse tensor (`Layout::sparse[i]`).
enum Output {
    Column(usize),
    Sparse(usize),
}

/// A sparse feature's columns and what each record must satisfy.
struct Sparse {
    spec: FeatureSpec,
    values: usize,
    indices: Vec<usize>,
    size: Vec<usize>,
    already_sorted: bool,
}

impl Layout {
    fn of(features: &[FeatureSpec]) -> Layout {
        let mut layout = Layout { columns: Vec::new(), sparse: Vec::new(), outputs: Vec::new() };
        for f in features {
            let output = match &f.kind {
                FeatureKind::Sparse { index_keys, value_key, size, already_sorted } => {
                    let values = layout.var_len(value_key, f.dtype);
                    let indices = index_keys.iter().map(|k| layout.var_len(k, DType::Int64)).collect();
                    let (size, already_sorted) = (size.clone(), *already_sorted);
                    layout.sparse.push(Sparse { spec: f.clone(), values, indices, size, already_sorted });
                    Output::Sparse(layout.sparse.len() - 1)
                }
                _ => {
                    layout.columns.push(f.clone());
                    Output::Column(layout.columns.len() - 1)
                }
            };
            layout.outputs.push(output);
        }
        layout
    }

    /// The variable-length column of `key` and `dtype`, added unless there is one.
    fn var_len(&mut self, key: &str, dtype: DType) -> usize {
        let same = |c: &FeatureSpec| c.name == key && c.dtype == dtype && c.kind == FeatureKind::VarLen;
        self.columns.iter().position(same).unwrap_or_else(|| {
            self.columns.push(FeatureSpec::var_len(key, dtype));
            self.columns.len() - 1
        })
    }
}

impl Output {
    fn array(&self, parsed: &[ArrayRef], sparse: &[Sparse]) -> ArrayRef {
        match self {
            Output::Column(i) => parsed[*i].clone(),
            Output::Sparse(i) => sparse[*i].array(parsed),
        }
    }
}

impl Sparse {
    /// The last record's entries: as many coordinates in each index feature as values, each
    /// within the dense shape.
    fn check(&self, columns: &[Column]) -> Result<(), String> {
        let count = |c: &Column| {
            let o = &c.offsets;
            (o[o.len() - 2] as usize, o[o.len() - 1] as usize)
        };
        let (start, end) = count(&columns[self.values]);
        let name = &self.spec.name;
        for (d, &i) in self.indices.iter().enumerate() {
            let column = &columns[i];
            let (s, e) = count(column);
            if e - s != end - start {
                return Err(format!(
                    "sparse feature '{name}': index feature '{}' has {} values, value feature '{}' has {}",
                    column.spec.name,
                    e - s,
                    columns[self.values].spec.name,
                    end - start
                ));
            }
            let Values::Int64(values) = &column.values else { unreachable!("index features are int64") };
            if let Some(bad) = values[s..e].iter().find(|&&x| x < 0 || x as u64 >= self.size[d] as u64) {
                return Err(format!(
                    "sparse feature '{name}': index {bad} of feature '{}' is outside [0, {})",
                    column.spec.name, self.size[d]
                ));
            }
        }
        Ok(())
    }

    /// The sparse tensors of the parsed records: per record its coordinates (sorted unless
    /// `already_sorted`), values and dense shape (the feature's size).
    fn array(&self, parsed: &[ArrayRef]) -> ArrayRef {
        let values = parsed[self.values].as_list::<i32>();
        let offsets = values.offsets().clone();
        let indices: Vec<&Int64Array> =
            self.indices.iter().map(|&i| parsed[i].as_list::<i32>().values().as_primitive::<Int64Type>()).collect();
        let rank = indices.len();
        let total = *offsets.last().expect("offsets start with 0") as usize;
        let mut coords = Vec::with_capacity(total * rank);
        // Where each output value comes from; only built once a record needs sorting.
        let mut order: Option<Vec<u32>> = None;
        for w in offsets.windows(2) {
            let (s, e) = (w[0] as usize, w[1] as usize);
            let key = |j: usize| indices.iter().map(move |a| a.value(j));
            let sorted = self.already_sorted || (s + 1..e).all(|j| key(j - 1).le(key(j)));
            if sorted {
                coords.extend((s..e).flat_map(&key));
                if let Some(order) = &mut order {
                    order.extend((s as u32)..(e as u32));
                }
            } else {
                let mut perm: Vec<usize> = (s..e).collect();
                perm.sort_by(|&a, &b| key(a).cmp(key(b)));
                coords.extend(perm.iter().flat_map(|&j| key(j)));
                order.get_or_insert_with(|| (0..s as u32).collect()).extend(perm.iter().map(|&j| j as u32));
            }
        }
        let flat = values.values().clone();
        let flat = match order {
            Some(order) => arrow::compute::take(&flat, &UInt32Array::from(order), None).expect("indices in range"),
            None => flat,
        };
        let field = self.spec.field();
        let DataType::Struct(fields) = field.arrow_type() else { unreachable!("a sparse field is a struct") };
        let dense_shapes = flumen_ir::sparse::smallest_dense_shapes(&field.shape, &offsets, &coords);
        let parts = flumen_ir::sparse::SparseParts { offsets, coords, values: flat, dense_shapes };
        Arc::new(flumen_ir::sparse::build(&fields, parts, None).expect("checked coordinates of a sparse feature"))
    }
}

/// The number of values to allocate for `spec` over `records`, so that its buffer is not
/// regrown (and copied) as it fills: a fixed-length feature's exact count; for a
/// variable-length one, a guess from the records' bytes, which bound it (a packed float takes
/// four bytes, a varint at least one): one int64 per two bytes, one float per four.
fn capacity(spec: &FeatureSpec, records: &Records) -> usize {
    match (&spec.kind, spec.dtype) {
        (FeatureKind::FixedLen { .. }, _) => records.array().len() * spec.values_per_record().max(1),
        (_, DType::Float32) => records.bytes() / 4,
        (_, _) => records.bytes() / 2,
    }
}

/// The column of one feature: flat values wrapped in its shape, or lists by offsets.
fn finish(column: Column) -> ArrayRef {
    let field = column.spec.field();
    let flat: ArrayRef = match column.values {
        Values::Int64(v) => Arc::new(Int64Array::from(v)),
        Values::Float32(v) => Arc::new(Float32Array::new(v.into(), None)),
        Values::Bytes(mut b) => Arc::new(b.finish()),
    };
    let array: ArrayRef = match &column.spec.kind {
        FeatureKind::VarLen => {
            let item = Arc::new(Field::new("item", flat.data_type().clone(), true));
            let offsets = OffsetBuffer::new(column.offsets.into());
            Arc::new(ListArray::new(item, offsets, flat, None))
        }
        FeatureKind::Sparse { .. } => unreachable!("a sparse feature is parsed into variable-length columns"),
        FeatureKind::FixedLen { shape, .. } => {
            // Innermost dimension first: each level groups `d` items of the level below.
            shape.iter().rev().fold(flat, |inner, &d| {
                let item = Arc::new(Field::new("item", inner.data_type().clone(), true));
                Arc::new(FixedSizeListArray::new(item, d as i32, inner, None))
            })
        }
    };
    debug_assert_eq!(array.data_type(), &field.arrow_type(), "{field}");
    array
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Int64Type};

    use flumen_ir::FieldSpec;

    use super::*;

    #[test]
    fn packed_varints_of_every_length_decode_as_one_at_a_time() {
        // Values of 1 to 10 bytes, negatives (10 bytes) included, in every alignment.
        let mut values: Vec<i64> = (0..63).map(|b| (1i64 << b) - 1).collect();
        values.extend([0, 1, 127, 128, 16383, 16384, 29999, -1, i64::MIN, i64::MAX, -300]);
        for skip in 0..values.len() {
            let mut bytes = vec![];
            values[skip..].iter().for_each(|v| put_varint(&mut bytes, *v as u64));
            let mut fast = vec![];
            packed_varints(&bytes, &mut fast).unwrap();
            let mut wire = Wire::new(&bytes);
            let mut slow = vec![];
            while !wire.done() {
                slow.push(wire.varint().unwrap() as i64);
            }
            assert_eq!(fast, slow);
            assert_eq!(fast, values[skip..]);
        }
        // A varint cut at the end is an error, not a value.
        assert!(packed_varints(&[0x80; 12], &mut vec![]).is_err());
    }

    #[test]
    fn packed_lists_of_every_length_decode_as_one_at_a_time() {
        // Lists of 0 to 300 bytes, mostly of values of 1 to 3 bytes with a long or negative
        // one now and then, so that the eight-byte reads meet the end of a list at every
        // offset and in every value.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..400 {
            let (mut bytes, mut values) = (vec![], vec![]);
            let target = next() as usize % 300;
            while bytes.len() < target {
                let r = next();
                let v = match r % 16 {
                    0 => -((r >> 8) as i64 % 1000) - 1,
                    1 => (r >> 4) as i64,
                    _ => ((r >> 8) % 100_000) as i64,
                };
                put_varint(&mut bytes, v as u64);
                values.push(v);
            }
            let mut fast = vec![];
            packed_varints(&bytes, &mut fast).unwrap();
            assert_eq!(fast, values);
            // After values already there (the list of an earlier record).
            let mut appended = vec![-7, 7];
            packed_varints(&bytes, &mut appended).unwrap();
            assert_eq!(appended[..2], [-7, 7]);
            assert_eq!(appended[2..], values);
            // Cut anywhere inside its last value, the list is an error.
            let last_start = bytes.iter().rev().skip(1).position(|b| *b < 0x80).map_or(0, |p| bytes.len() - 1 - p);
            for cut in last_start..bytes.len().saturating_sub(1) {
                assert!(packed_varints(&bytes[..cut + 1], &mut vec![]).is_err(), "cut at {cut} of {}", bytes.len());
            }
        }
        // Eleven continuation bytes inside a long list, and a list that never ends a value.
        let mut bytes = vec![1u8; 100];
        bytes[70..81].fill(0x80);
        assert!(packed_varints(&bytes, &mut vec![]).is_err());
        assert!(packed_varints(&[0x80; 200], &mut vec![]).is_err());
    }

    // Serialized `tf.train.Example`s made by an independent protobuf encoder (a few lines of
    // Python following example.proto and feature.proto):
    /// label=[3] (packed int64), x=[1.5, -2.0] (packed float), tags=[a, bc].
    const E1: &str = "0a360a0e0a056c6162656c12051a030a01030a110a0178120c120a0a080000c03f000000c00a110a047461677312090a070a01610a026263";
    /// x=[0.25, 4.0] (unpacked), an unrequested key, label=[-7] (unpacked), no tags, and an
    /// unknown field after the features.
    const E2: &str = "0a3b0a110a0178120c120a0d0000803e0d000080400a0e0a056f7468657212051a030a01090a160a056c6162656c120d1a0b08f9ffffffffffffffff011005";
    /// x=[1.0, 2.0] only: label is missing.
    const E3: &str = "0a130a110a0178120c120a0a080000803f00000040";
    /// label as a float list.
    const E4: &str = "0a260a110a056c6162656c120812060a040000803f0a110a0178120c120a0a080000803f00000040";
    /// x with one value where its shape holds two.
    const E5: &str = "0a1f0a0e0a056c6162656c12051a030a01010a0d0a0178120812060a040000803f";
    /// x listed twice: [9, 9] then [5, 6], which protobuf resolves to the last.
    const E6: &str = "0a360a0e0a056c6162656c12051a030a01010a110a0178120c120a0a0800001041000010410a110a0178120c120a0a080000a0400000c040";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    use arrow::array::make_view;
    use arrow::buffer::Buffer;

    fn records(hex: &[&str]) -> BinaryArray {
        BinaryArray::from_iter_values(hex.iter().map(|h| unhex(h)))
    }

    fn features(label_default: Option<i64>) -> Vec<FeatureSpec> {
        vec![
            FeatureSpec {
                name: "label".into(),
                dtype: DType::Int64,
                kind: FeatureKind::FixedLen { shape: vec![], default: label_default.map(|d| Defaults::Int64(vec![d])) },
            },
            FeatureSpec {
                name: "x".into(),
                dtype: DType::Float32,
                kind: FeatureKind::FixedLen { shape: vec![2], default: None },
            },
            FeatureSpec { name: "tags".into(), dtype: DType::Binary, kind: FeatureKind::VarLen },
        ]
    }

    #[test]
    fn fixed_and_variable_length_features_parse_in_both_encodings() {
        let cols = parse_examples(&records(&[E1, E2, E6]), &features(None)).unwrap();
        let spec = output_spec(&features(None)).unwrap();
        assert_eq!(spec.to_string(), "{label: int64[], x: float32[2], tags: ragged bytes[?]}");
        for (col, field) in cols.iter().zip(&spec.fields) {
            assert_eq!(col.data_type(), &field.arrow_type());
        }
        assert_eq!(cols[0].as_primitive::<Int64Type>().values().to_vec(), vec![3, -7, 1]);
        let x = cols[1].as_fixed_size_list().values().as_primitive::<Float32Type>().values().to_vec();
        assert_eq!(x, vec![1.5, -2.0, 0.25, 4.0, 5.0, 6.0]);
        let tags = cols[2].as_list::<i32>();
        assert_eq!(tags.value_offsets(), &[0, 2, 2, 2]);
        let values: Vec<&[u8]> = tags.values().as_binary::<i32>().iter().map(|v| v.unwrap()).collect();
        assert_eq!(values, vec![&b"a"[..], b"bc"]);
    }

    #[test]
    fn lengths_and_values_of_one_two_and_more_varint_bytes_parse() {
        // A 40-float list is 160 bytes, its length (and the entry's, and the map's) a
        // two-byte varint; ids take one, two, three and ten bytes (negative).
        let floats: Vec<f32> = (0..40).map(|i| i as f32 * 0.5).collect();
        let ids = [5i64, 300, 16_389, -2];
        let records = BinaryArray::from_iter_values(ids.iter().map(|id| {
            serialize_example(&[("id", FeatureValues::Int64(&[*id])), ("v", FeatureValues::Float32(&floats))])
        }));
        let features =
            [FeatureSpec::fixed("v", DType::Float32, vec![40]), FeatureSpec::fixed("id", DType::Int64, vec![])];
        let cols = parse_examples(&records, &features).unwrap();
        let v = cols[0].as_fixed_size_list().values().as_primitive::<Float32Type>().values().to_vec();
        assert_eq!(v, floats.repeat(4));
        assert_eq!(cols[1].as_primitive::<Int64Type>().values().to_vec(), ids.to_vec());
    }

    /// A pseudo-random number generator (xorshift64) from `seed`.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// An `Example` of layout `layout` with values from `draw` (the next pseudo-random
    /// number). Layouts: features in another order, missing, listed twice or beside an
    /// unrequested one; tags under the unrequested key `tagz`, or more than one; labels of
    /// one to three varint bytes, or two values where one is asked (`[5, 6]` takes the bytes
    /// of `[129]`: the same layout); `x` of one float where two are asked.
    fn example_of(layout: u64, draw: &mut impl FnMut() -> u64) -> Vec<u8> {
        let label: Vec<i64> = match layout % 4 {
            0 => vec![(draw() % 100) as i64],
            1 => vec![[129, 1000][draw() as usize % 2]],
            2 => vec![20_000 + (draw() % 1000) as i64],
            _ => [vec![5, 6], vec![129]][draw() as usize % 2].clone(),
        };
        let floats = if layout / 4 % 8 == 7 { 1 } else { 2 };
        let x: Vec<f32> = (0..floats).map(|_| (draw() % 1000) as f32 / 8.0).collect();
        let tag_count = if layout / 32 % 4 == 3 { 2 } else { 1 };
        let tag_bytes: Vec<Vec<u8>> = (0..tag_count).map(|_| vec![b'a' + (draw() % 26) as u8; 2]).collect();
        let tags: Vec<&[u8]> = tag_bytes.iter().map(Vec::as_slice).collect();
        let mut listed = vec![
            ("label", FeatureValues::Int64(&label)),
            ("x", FeatureValues::Float32(&x)),
            ("tags", FeatureValues::Bytes(&tags)),
        ];
        match layout / 128 % 8 {
            0 => listed.swap(0, 1),
            1 => drop(listed.remove(0)),
            2 => listed.push(("x", FeatureValues::Float32(&[7.0, 8.0]))),
            3 => listed.insert(1, ("other", FeatureValues::Int64(&[1, 2, 3]))),
            // Unrequested, and last: the bytes after the last requested value differ.
            4 => listed[2].0 = "tagz",
            _ => {}
        }
        serialize_example(&listed)
    }

    #[test]
    fn a_chunk_parses_as_its_records_one_at_a_time() {
        // Records of one layout are read where the record before had its values; any other
        // byte, count or order must be noticed. Each record parsed alone (in a chunk of its
        // own, so without a layout to reuse) is the reference.
        let mut draw = xorshift(0x2545_f491_4f6c_dd1du64);
        // Runs of one to six records of one layout, the layouts drawn anew for every run or
        // (a third of the time) changed only where it matters least, the tags' key.
        let (mut examples, mut layout) = (Vec::new(), 0);
        while examples.len() < 1000 {
            layout = match draw() % 3 {
                0 => layout ^ (4 * 128),
                _ => draw(),
            };
            for _ in 0..1 + draw() % 6 {
                examples.push(example_of(layout, &mut draw));
            }
        }
        // The labels again as a sparse feature (its indices and values), so that two
        // columns read that key.
        let mut features = features(Some(-1));
        features.push(FeatureSpec::sparse("sp", DType::Int64, vec!["label".into()], "label", vec![30_000]));
        let alone: Vec<_> =
            examples.iter().map(|e| parse_examples(&BinaryArray::from_iter_values([e]), &features)).collect();
        let good: Vec<usize> = (0..examples.len()).filter(|&i| alone[i].is_ok()).collect();
        let bad: Vec<usize> = (0..examples.len()).filter(|&i| alone[i].is_err()).collect();
        assert!(good.len() > 500 && bad.len() > 50, "{} good, {} bad", good.len(), bad.len());
        let chunk =
            parse_examples(&BinaryArray::from_iter_values(good.iter().map(|&i| &examples[i])), &features).unwrap();
        for (c, column) in chunk.iter().enumerate() {
            let singles: Vec<ArrayRef> = good.iter().map(|&i| alone[i].as_ref().unwrap()[c].clone()).collect();
            let singles: Vec<&dyn Array> = singles.iter().map(|a| a.as_ref()).collect();
            assert_eq!(column.to_data(), arrow::compute::concat(&singles).unwrap().to_data(), "column {c}");
        }
        // A bad record after good ones of every layout fails as it does alone.
        for (k, &b) in bad.iter().enumerate() {
            let before = &good[k * 3 % (good.len() - 3)..][..3];
            let records = BinaryArray::from_iter_values(before.iter().chain([&b]).map(|&i| &examples[i]));
            let err = parse_examples(&records, &features).unwrap_err();
            let alone = alone[b].as_ref().unwrap_err();
            assert_eq!((err.row, &err.message), (3, &alone.message), "record {b}");
        }
    }

    #[test]
    fn records_viewed_where_they_were_read_parse_as_contiguous_ones() {
        let mut draw = xorshift(0x9e37_79b9_7f4a_7c15u64);
        // Records of every layout, and records short enough to sit inside their views: an
        // empty `Example` and one with an empty `Features`.
        let features = [
            FeatureSpec::fixed("label", DType::Int64, vec![]).with_default(Defaults::Int64(vec![-1])),
            FeatureSpec::var_len("x", DType::Float32),
            FeatureSpec::var_len("tags", DType::Binary),
        ];
        let parses = |e: &Vec<u8>| parse_examples(&BinaryArray::from_iter_values([e]), &features).is_ok();
        let mut examples: Vec<Vec<u8>> = (0..400).map(|i| example_of(i * 7, &mut draw)).filter(parses).collect();
        assert!(examples.len() > 250, "{} records parse", examples.len());
        examples.insert(5, vec![]);
        examples.insert(9, vec![0x0a, 0x00]);
        // Two buffers, each record followed by bytes that read as the start of another
        // field (a reader's window has the next record's framing there), which a parse must
        // not read past the record's end.
        let views = |records: &[Vec<u8>]| {
            let (mut buffers, mut views) = (vec![Vec::new(), Vec::new()], vec![]);
            for (i, record) in records.iter().enumerate() {
                let buffer = &mut buffers[i % 2];
                views.push(make_view(record, (i % 2) as u32, buffer.len() as u32));
                buffer.extend_from_slice(record);
                buffer.extend_from_slice(&[0x0a, 0x05, 0x0a, 0x03, 0x0a, 0x01, 0x78]);
            }
            let buffers: Vec<Buffer> = buffers.into_iter().map(Buffer::from_vec).collect();
            BinaryViewArray::try_new(views.into(), buffers, None).unwrap()
        };
        let viewed = parse_examples(&views(&examples), &features).unwrap();
        let contiguous = parse_examples(&BinaryArray::from_iter_values(&examples), &features).unwrap();
        assert_eq!(viewed.len(), 3);
        for (v, c) in viewed.iter().zip(&contiguous) {
            assert_eq!(v.to_data(), c.to_data());
        }
        assert_eq!(viewed[0].as_primitive::<Int64Type>().value(5), -1, "the empty Example takes the default");
        // A bad record (a label of two values where one is asked) fails at its row.
        let (mut bad, at) = (examples.clone(), 200);
        bad[at] = serialize_example(&[("label", FeatureValues::Int64(&[1, 2]))]);
        let err = parse_examples(&views(&bad), &features).unwrap_err();
        assert_eq!(err.row, at, "{}", err.message);
    }

    #[test]
    fn a_null_record_is_an_error_at_its_row() {
        let e1 = unhex(E1);
        let contiguous = BinaryArray::from_iter([Some(&e1[..]), Some(&e1[..]), None]);
        let viewed = BinaryViewArray::from_iter([Some(&e1[..]), None]);
        for (records, row) in [(&contiguous as &dyn Array, 2), (&viewed, 1)] {
            let err = parse_examples(records, &features(None)).unwrap_err();
            assert_eq!((err.row, err.message.as_str()), (row, "the record is null"));
        }
    }

    #[test]
    fn keys_are_the_same_exactly_when_every_byte_is() {
        for n in 0..24usize {
            let a: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(37) ^ 5).collect();
            assert!(same(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same(&a, &b), "length {n}, byte {at}");
            }
            if n > 0 {
                assert!(!same(&a, &a[..n - 1]), "{n}");
                assert_eq!(same(&a[1..], &a[..n - 1]), a[1..] == a[..n - 1], "{n}");
            }
        }
    }

    #[test]
    fn a_missing_feature_takes_its_default_or_is_an_error() {
        let cols = parse_examples(&records(&[E3, E1]), &features(Some(-1))).unwrap();
        assert_eq!(cols[0].as_primitive::<Int64Type>().values().to_vec(), vec![-1, 3]);
        let err = parse_examples(&records(&[E1, E3]), &features(None)).unwrap_err();
        assert_eq!(err, ParseError { row: 1, message: "required feature 'label' is missing".into() });
    }

    #[test]
    fn wrong_types_counts_and_bytes_are_errors_naming_the_record() {
        let err = parse_examples(&records(&[E4]), &features(None)).unwrap_err();
        assert_eq!(err.message, "feature 'label' is float, expected int64");
        let err = parse_examples(&records(&[E1, E1, E5]), &features(None)).unwrap_err();
        assert_eq!((err.row, err.message.as_str()), (2, "feature 'x' has 1 values, its shape holds 2"));
        let cut = &E1[..E1.len() - 6];
        let err = parse_examples(&records(&[cut]), &features(None)).unwrap_err();
        assert!(err.message.contains("past the end"), "{err:?}");
        let bad_spec = vec![FeatureSpec {
            name: "label".into(),
            dtype: DType::Int64,
            kind: FeatureKind::FixedLen { shape: vec![2], default: Some(Defaults::Int64(vec![0])) },
        }];
        assert!(output_spec(&bad_spec).unwrap_err().contains("its default has 1 int64 values, the feature 2"));
    }

    #[test]
    fn serialized_examples_are_tensorflows_bytes_and_parse_back() {
        let tags: [&[u8]; 2] = [b"a", b"bc"];
        let e1 = serialize_example(&[
            ("label", FeatureValues::Int64(&[3])),
            ("x", FeatureValues::Float32(&[1.5, -2.0])),
            ("tags", FeatureValues::Bytes(&tags)),
        ]);
        assert_eq!(e1, unhex(E1), "the independent encoder's bytes");
        let e2 =
            serialize_example(&[("x", FeatureValues::Float32(&[0.5, 1.0])), ("label", FeatureValues::Int64(&[-7]))]);
        let cols = parse_examples(&BinaryArray::from_iter_values([e1, e2]), &features(None)).unwrap();
        assert_eq!(cols[0].as_primitive::<Int64Type>().values().to_vec(), vec![3, -7]);
    }

    /// Each row of a parsed sparse column as (coordinates, values shown).
    fn sparse_rows(column: &ArrayRef) -> Vec<(Vec<Vec<i64>>, Vec<String>)> {
        let parts = column.as_struct();
        let (coords, values) = (parts.column(0).as_list::<i32>(), parts.column(1).as_list::<i32>());
        (0..column.len())
            .map(|r| {
                let c = coords.value(r);
                let c = c.as_fixed_size_list();
                let points = (0..c.len()).map(|i| c.value(i).as_primitive::<Int64Type>().values().to_vec()).collect();
                let v = values.value(r);
                let shown = (0..v.len())
                    .map(|i| match v.data_type() {
                        DataType::Float32 => v.as_primitive::<Float32Type>().value(i).to_string(),
                        _ => String::from_utf8(v.as_binary::<i32>().value(i).to_vec()).unwrap(),
                    })
                    .collect();
                (points, shown)
            })
            .collect()
    }

    #[test]
    fn sparse_features_gather_values_at_sorted_coordinates() {
        let e1 = serialize_example(&[
            ("idx", FeatureValues::Int64(&[3, 1, 4])),
            ("val", FeatureValues::Float32(&[30.0, 10.0, 40.0])),
        ]);
        let e2 = serialize_example(&[("idx", FeatureValues::Int64(&[])), ("val", FeatureValues::Float32(&[]))]);
        let e3 = serialize_example(&[("val", FeatureValues::Float32(&[2.5])), ("idx", FeatureValues::Int64(&[0]))]);
        let records = BinaryArray::from_iter_values([&e1, &e2, &e3]);
        let sparse = FeatureSpec::sparse("s", DType::Float32, vec!["idx".into()], "val", vec![5]);
        // The index key is also asked for as a feature of its own: both read it.
        let as_written = FeatureSpec::sparse("t", DType::Float32, vec!["idx".into()], "val", vec![5]).already_sorted();
        let features = vec![sparse, FeatureSpec::var_len("idx", DType::Int64), as_written];
        let spec = output_spec(&features).unwrap();
        assert_eq!(spec.fields[0], FieldSpec::sparse("s", DType::Float32, vec![5]));
        let cols = parse_examples(&records, &features).unwrap();
        for (c, f) in cols.iter().zip(&spec.fields) {
            assert_eq!(c.data_type(), &f.arrow_type(), "{f}");
        }
        let row = |points: &[i64], values: &[&str]| {
            (points.iter().map(|p| vec![*p]).collect::<Vec<_>>(), values.iter().map(|v| v.to_string()).collect())
        };
        assert_eq!(
            sparse_rows(&cols[0]),
            vec![row(&[1, 3, 4], &["10", "30", "40"]), row(&[], &[]), row(&[0], &["2.5"])]
        );
        assert_eq!(cols[1].as_list::<i32>().value(0).as_primitive::<Int64Type>().values().to_vec(), vec![3, 1, 4]);
        // already_sorted: the records' order is kept.
        assert_eq!(sparse_rows(&cols[2])[0], row(&[3, 1, 4], &["30", "10", "40"]));
    }

    #[test]
    fn sparse_features_of_several_dimensions_sort_by_coordinates() {
        let values: [&[u8]; 3] = [b"a", b"b", b"c"];
        let e = serialize_example(&[
            ("row", FeatureValues::Int64(&[1, 0, 0])),
            ("col", FeatureValues::Int64(&[0, 2, 1])),
            ("word", FeatureValues::Bytes(&values)),
        ]);
        let sorted = serialize_example(&[
            ("row", FeatureValues::Int64(&[0])),
            ("col", FeatureValues::Int64(&[0])),
            ("word", FeatureValues::Bytes(&[b"z"])),
        ]);
        let features =
            vec![FeatureSpec::sparse("m", DType::Binary, vec!["row".into(), "col".into()], "word", vec![2, 3])];
        let cols = parse_examples(&BinaryArray::from_iter_values([&sorted, &e]), &features).unwrap();
        let points = |p: &[[i64; 2]]| p.iter().map(|x| x.to_vec()).collect::<Vec<_>>();
        let strs = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            sparse_rows(&cols[0]),
            vec![(points(&[[0, 0]]), strs(&["z"])), (points(&[[0, 1], [0, 2], [1, 0]]), strs(&["c", "b", "a"]))]
        );
    }

    #[test]
    fn sparse_features_with_unmatched_or_out_of_range_indices_are_errors_naming_the_record() {
        let good = serialize_example(&[("i", FeatureValues::Int64(&[1])), ("v", FeatureValues::Float32(&[1.0]))]);
        let features = vec![FeatureSpec::sparse("s", DType::Float32, vec!["i".into()], "v", vec![4])];
        for (bad, why) in [
            (
                serialize_example(&[("i", FeatureValues::Int64(&[1, 2])), ("v", FeatureValues::Float32(&[1.0]))]),
                "sparse feature 's': index feature 'i' has 2 values, value feature 'v' has 1",
            ),
            (
                serialize_example(&[("i", FeatureValues::Int64(&[4])), ("v", FeatureValues::Float32(&[1.0]))]),
                "sparse feature 's': index 4 of feature 'i' is outside [0, 4)",
            ),
            (
                serialize_example(&[("i", FeatureValues::Int64(&[-1])), ("v", FeatureValues::Float32(&[1.0]))]),
                "sparse feature 's': index -1 of feature 'i' is outside [0, 4)",
            ),
            (
                serialize_example(&[("i", FeatureValues::Float32(&[1.0])), ("v", FeatureValues::Float32(&[1.0]))]),
                "feature 'i' is float, expected int64",
            ),
        ] {
            let err = parse_examples(&BinaryArray::from_iter_values([&good, &bad]), &features).unwrap_err();
            assert_eq!((err.row, err.message.as_str()), (1, why));
        }
        let two_keys_one_dim =
            vec![FeatureSpec::sparse("s", DType::Float32, vec!["i".into(), "j".into()], "v", vec![4])];
        let err = output_spec(&two_keys_one_dim).unwrap_err();
        assert!(err.contains("2 index keys for a dense shape of 1 dimensions"), "{err}");
    }

    #[test]
    fn multi_dimensional_shapes_nest_fixed_size_lists() {
        let spec = vec![FeatureSpec {
            name: "x".into(),
            dtype: DType::Float32,
            kind: FeatureKind::FixedLen { shape: vec![1, 2], default: None },
        }];
        let cols = parse_examples(&records(&[E1, E3]), &spec).unwrap();
        assert_eq!(cols[0].data_type(), &output_spec(&spec).unwrap().fields[0].arrow_type());
        let rows = cols[0].as_fixed_size_list();
        assert_eq!((rows.len(), rows.value_length()), (2, 1));
    }
}

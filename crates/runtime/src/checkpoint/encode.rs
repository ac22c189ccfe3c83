//! The checkpoint file format, version 1. All integers are little-endian.
//!
//! ```text
//! offset  size  what
//! 0       8     magic "FLUMENCK"
//! 8       4     format version (u32), 1
//! 12      8     header length H (u64)
//! 20      H     header: UTF-8 JSON (below)
//! 20+H    8     blob count N (u64)
//! ...           N times: blob length L (u64), then L bytes: one Arrow IPC stream holding one
//!               buffered chunk
//! end-4   4     CRC-32 (IEEE) of every byte before it
//! ```
//!
//! The header is `{"version", "dataset_fingerprint", "plan_fingerprint", "mode", "iteration",
//! "unseeded", "elements", "state"}`: the fingerprint of the dataset's written plan (seeds
//! included) and of the optimized plan that ran, the mode (`full` or `symbolic`), the
//! iteration index and unseeded base seed the iterator derived its random streams from, the
//! number of elements it had delivered, and the operator state tree. A state node is
//! `{"kind", "fields", "chunks": [blob index...], "errors": [saved error...], "children":
//! [node or null...]}`. A reader rejects another magic, a newer version, a bad CRC and
//! anything truncated, with the byte offset.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::checkpoint::saved_error::SavedError;
use crate::checkpoint::state::{OpState, SaveMode};

/// The format version this build writes and the newest it reads.
pub const CHECKPOINT_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"FLUMENCK";

/// A saved iterator: what it was iterating, where it was, and its operators' states.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The fingerprint of the dataset's written plan (seeds included).
    pub dataset_fingerprint: String,
    /// The fingerprint of the optimized plan that ran (differs when options differ).
    pub plan_fingerprint: String,
    /// What was stored of buffered elements.
    pub mode: SaveMode,
    /// The iteration index the iterator derived its random streams from.
    pub iteration: u64,
    /// The dataset's base seed for unseeded random operators.
    pub unseeded: u64,
    /// Elements the iterator had delivered (errors included).
    pub elements: u64,
    /// The state of the iterator and, below it, of every operator.
    pub state: OpState,
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    dataset_fingerprint: String,
    plan_fingerprint: String,
    mode: SaveMode,
    iteration: u64,
    unseeded: u64,
    elements: u64,
    state: Value,
}

fn corrupt(offset: usize, message: impl std::fmt::Display) -> Error {
    Error::data(flumen_ir::Location::new("checkpoint", format!("byte {offset}")), message.to_string())
}

impl Checkpoint {
    /// The checkpoint as bytes in the format above.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut blobs = Vec::new();
        let header = Header {
            version: CHECKPOINT_VERSION,
            dataset_fingerprint: self.dataset_fingerprint.clone(),
            plan_fingerprint: self.plan_fingerprint.clone(),
            mode: self.mode,
            iteration: self.iteration,
            unseeded: self.unseeded,
            elements: self.elements,
            state: node_to_json(&self.state, &mut blobs)?,
        };
        let header = serde_json::to_vec(&header).map_err(|e| Error::Serde(e.to_string()))?;
        let mut out = Vec::with_capacity(header.len() + blobs.iter().map(|b| b.len() + 8).sum::<usize>() + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&(blobs.len() as u64).to_le_bytes());
        for blob in &blobs {
            out.extend_from_slice(&(blob.len() as u64).to_le_bytes());
            out.extend_from_slice(blob);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads a checkpoint written by [`Checkpoint::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Checkpoint> {
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(corrupt(0, "not a flumen checkpoint (bad magic)"));
        }
        if bytes.len() < 8 + 4 + 8 + 8 + 4 {
            return Err(corrupt(bytes.len(), "truncated checkpoint"));
        }
        let body = &bytes[..bytes.len() - 4];
        let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version > CHECKPOINT_VERSION {
            return Err(corrupt(
                8,
                format!("checkpoint format version {version} is newer than this build's {CHECKPOINT_VERSION}"),
            ));
        }
        if crc32fast::hash(body) != stored {
            return Err(corrupt(bytes.len() - 4, "checksum mismatch: the checkpoint is corrupt or truncated"));
        }
        let mut at = 12;
        let header_len = read_len(body, &mut at)?;
        let header = take(body, &mut at, header_len)?;
        let header: Header = serde_json::from_slice(header).map_err(|e| corrupt(20, format!("bad header: {e}")))?;
        let count = read_len(body, &mut at)?;
        let mut blobs = Vec::with_capacity(count.min(1 << 20));
        for _ in 0..count {
            let len = read_len(body, &mut at)?;
            let start = at;
            blobs.push(decode_chunk(take(body, &mut at, len)?).map_err(|e| corrupt(start, e))?);
        }
        if at != body.len() {
            return Err(corrupt(at, "trailing bytes after the last blob"));
        }
        Ok(Checkpoint {
            dataset_fingerprint: header.dataset_fingerprint,
            plan_fingerprint: header.plan_fingerprint,
            mode: header.mode,
            iteration: header.iteration,
            unseeded: header.unseeded,
            elements: header.elements,
            state: node_from_json(header.state, &blobs)?,
        })
    }
}

fn read_len(body: &[u8], at: &mut usize) -> Result<usize> {
    let bytes = take(body, at, 8)?;
    let len = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    usize::try_from(len).map_err(|_| corrupt(*at - 8, "length does not fit in memory"))
}

fn take<'a>(body: &'a [u8], at: &mut usize, len: usize) -> Result<&'a [u8]> {
    let end = at.checked_add(len).filter(|e| *e <= body.len()).ok_or_else(|| corrupt(*at, "truncated checkpoint"))?;
    let out = &body[*at..end];
    *at = end;
    Ok(out)
}

fn encode_chunk(chunk: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, chunk.schema_ref())?;
    writer.write(chunk)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

fn decode_chunk(bytes: &[u8]) -> std::result::Result<RecordBatch, String> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
    let chunk = reader.next().ok_or("a chunk blob holds no batch")?.map_err(|e| e.to_string())?;
    Ok(chunk)
}

fn node_to_json(state: &OpState, blobs: &mut Vec<Vec<u8>>) -> Result<Value> {
    let mut chunks = Vec::with_capacity(state.chunks.len());
    for chunk in &state.chunks {
        chunks.push(blobs.len());
        blobs.push(encode_chunk(chunk)?);
    }
    let children = state
        .children
        .iter()
        .map(|c| c.as_ref().map_or(Ok(Value::Null), |c| node_to_json(c, blobs)))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "kind": state.kind,
        "fields": state.fields,
        "chunks": chunks,
        "errors": state.errors,
        "children": children,
    }))
}

fn node_from_json(value: Value, blobs: &[RecordBatch]) -> Result<OpState> {
    let bad = |what: &str| corrupt(20, format!("bad state node: {what}"));
    let Value::Object(mut node) = value else { return Err(bad("not an object")) };
    let mut field = |name: &str| node.remove(name).ok_or_else(|| bad(&format!("no '{name}'")));
    let kind = field("kind")?.as_str().ok_or_else(|| bad("kind"))?.to_string();
    let fields: Map<String, Value> = serde_json::from_value(field("fields")?).map_err(|_| bad("fields"))?;
    let chunk_refs: Vec<usize> = serde_json::from_value(field("chunks")?).map_err(|_| bad("chunks"))?;
    let errors: Vec<SavedError> = serde_json::from_value(field("errors")?).map_err(|_| bad("errors"))?;
    let Value::Array(children) = field("children")? else { return Err(bad("children")) };
    let chunks =
        chunk_refs.iter().map(|i| blobs.get(*i).cloned().ok_or_else(|| bad("chunk index"))).collect::<Result<_>>()?;
    let children = children
        .into_iter()
        .map(|c| if c.is_null() { Ok(None) } else { node_from_json(c, blobs).map(Some) })
        .collect::<Result<_>>()?;
    Ok(OpState { kind, fields, chunks, errors, children })
}

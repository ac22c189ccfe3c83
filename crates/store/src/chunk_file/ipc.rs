//! Chunks and schemas as Arrow IPC messages, in the payload layout the module doc describes.

use std::collections::HashMap;
use std::panic;

use arrow::array::ArrayRef;
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::convert::try_schema_from_flatbuffer_bytes;
use arrow::ipc::reader::{read_dictionary, read_record_batch};
use arrow::ipc::writer::{DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::ipc::{root_as_message, MessageHeader, MetadataVersion};
use arrow::record_batch::RecordBatch;

/// Buffers are padded to 8 bytes: enough for every primitive type up to 64 bits to be read in
/// place, without the up-to-63 bytes per buffer that Arrow's default 64-byte padding costs.
const ALIGNMENT: usize = 8;

/// Encodes a schema's chunks as payloads.
pub(crate) struct Encoder {
    schema: SchemaRef,
    generator: IpcDataGenerator,
    options: IpcWriteOptions,
    context: IpcWriteContext,
    has_dictionaries: bool,
}

impl Encoder {
    pub(crate) fn new(schema: SchemaRef) -> Result<Encoder, ArrowError> {
        let options = IpcWriteOptions::try_new(ALIGNMENT, false, MetadataVersion::V5)?;
        let has_dictionaries =
            schema.flattened_fields().iter().any(|f| matches!(f.data_type(), DataType::Dictionary(..)));
        Ok(Encoder {
            schema,
            generator: IpcDataGenerator::default(),
            options,
            context: IpcWriteContext::default(),
            has_dictionaries,
        })
    }

    /// The IPC `Schema` message of the schema (a flatbuffer).
    pub(crate) fn schema_message(&self) -> Vec<u8> {
        let mut tracker = DictionaryTracker::new(false);
        self.generator.schema_to_bytes_with_dictionary_tracker(&self.schema, &mut tracker, &self.options).ipc_message
    }

    /// Replaces `raw` with the payload of `batch`: its dictionaries, then the batch.
    pub(crate) fn encode(&mut self, batch: &RecordBatch, raw: &mut Vec<u8>) -> Result<(), ArrowError> {
        // A fresh tracker per chunk makes every frame carry all its dictionaries, so any frame
        // decodes alone (resuming at a frame needs nothing from the frames before it). The
        // schema pass registers the dictionary ids that encoding looks up.
        let mut tracker = DictionaryTracker::new(false);
        if self.has_dictionaries {
            self.generator.schema_to_bytes_with_dictionary_tracker(&self.schema, &mut tracker, &self.options);
        }
        let (dictionaries, batch) = self.generator.encode(batch, &mut tracker, &self.options, &mut self.context)?;
        raw.clear();
        for message in dictionaries.into_iter().chain(std::iter::once(batch)) {
            append_message(raw, message);
        }
        Ok(())
    }
}

fn append_message(raw: &mut Vec<u8>, message: EncodedData) {
    raw.extend_from_slice(&(message.ipc_message.len() as u32).to_le_bytes());
    raw.extend_from_slice(&message.ipc_message);
    pad(raw);
    raw.extend_from_slice(&message.arrow_data);
    pad(raw);
}

fn pad(raw: &mut Vec<u8>) {
    raw.resize(raw.len().next_multiple_of(ALIGNMENT), 0);
}

/// Decodes a schema frame's payload.
pub(crate) fn decode_schema(bytes: &[u8]) -> Result<Schema, String> {
    // Arrow panics on schema messages it cannot represent (unknown type widths, ...): a
    // crafted file must still be an error.
    panic::catch_unwind(|| try_schema_from_flatbuffer_bytes(bytes))
        .map_err(|_| "bad schema (Arrow cannot decode it)".to_string())?
        .map_err(|e| format!("bad schema: {e}"))
}

/// Decodes a chunk frame's decompressed payload against the file's schema (as decoded from
/// its schema frame, which carries the dictionary ids). The arrays share `raw`'s memory.
pub(crate) fn decode_chunk(raw: &Buffer, schema: &SchemaRef) -> Result<RecordBatch, String> {
    // Arrow's IPC decoder panics on some malformed messages (buffer lengths it does not
    // check). The checksum rules out accidental damage; this keeps a file from a buggy or
    // hostile writer an error rather than a panic.
    panic::catch_unwind(|| decode_messages(raw, schema))
        .unwrap_or_else(|_| Err("bad chunk payload (Arrow cannot decode it)".to_string()))
}

fn decode_messages(raw: &Buffer, schema: &SchemaRef) -> Result<RecordBatch, String> {
    let mut dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
    let mut at = 0usize;
    while at < raw.len() {
        let meta_len = raw
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or("bad chunk payload (message length cut short)")?;
        let meta_start = at + 4;
        let meta = raw.get(meta_start..meta_start + meta_len).ok_or("bad chunk payload (message cut short)")?;
        let message = root_as_message(meta).map_err(|e| format!("bad chunk payload (message: {e})"))?;
        let body_start = (meta_start + meta_len).next_multiple_of(ALIGNMENT);
        let body_len = usize::try_from(message.bodyLength()).map_err(|_| "bad chunk payload (negative body length)")?;
        if body_start.checked_add(body_len).is_none_or(|end| end > raw.len()) {
            return Err("bad chunk payload (message body cut short)".to_string());
        }
        let body = raw.slice_with_length(body_start, body_len);
        at = (body_start + body_len).next_multiple_of(ALIGNMENT);
        match message.header_type() {
            MessageHeader::DictionaryBatch => {
                let dictionary = message.header_as_dictionary_batch().ok_or("bad chunk payload (dictionary header)")?;
                read_dictionary(&body, dictionary, schema, &mut dictionaries, &message.version())
                    .map_err(|e| format!("bad chunk payload (dictionary: {e})"))?;
            }
            MessageHeader::RecordBatch if at >= raw.len() => {
                let batch = message.header_as_record_batch().ok_or("bad chunk payload (record batch header)")?;
                return read_record_batch(&body, batch, schema.clone(), &dictionaries, None, &message.version())
                    .map_err(|e| format!("bad chunk payload (record batch: {e})"));
            }
            other => return Err(format!("bad chunk payload (unexpected {other:?} message)")),
        }
    }
    Err("bad chunk payload (no record batch)".to_string())
}

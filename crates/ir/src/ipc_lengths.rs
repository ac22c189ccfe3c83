//! The length fields of an Arrow IPC stream's messages, checked against the data before
//! Arrow reads it: its stream reader allocates what a message's header and body lengths
//! say, so a corrupt length asked for gigabytes and aborted the process.

use std::io::{BufRead, Seek};

/// A message whose header or body reaches past the end of the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongMessage {
    /// The byte where the message starts.
    pub at: u64,
    /// The record batches before it.
    pub batches: usize,
    /// Which length is too long: `"header"` or `"body"`.
    pub part: &'static str,
    /// What that length says.
    pub len: i64,
}

/// The first message of the IPC stream in `input` (read from its start, `len` bytes in
/// all) whose header or body would reach past the data; `None` when every message fits.
/// Only the headers are read. A header that does not parse ends the walk: that is the
/// reader's to report.
pub fn first_long_message(input: &mut (impl BufRead + Seek), len: u64) -> std::io::Result<Option<LongMessage>> {
    let (mut at, mut batches) = (0u64, 0usize);
    let mut word = [0u8; 4];
    loop {
        if len - at < 4 {
            return Ok(None);
        }
        input.read_exact(&mut word)?;
        let mut meta = u32::from_le_bytes(word);
        let mut header = 4;
        if meta == u32::MAX {
            // The continuation marker, then the length.
            if len - at < 8 {
                return Ok(None);
            }
            input.read_exact(&mut word)?;
            meta = u32::from_le_bytes(word);
            header = 8;
        }
        let meta = u64::from(meta);
        if meta == 0 {
            return Ok(None);
        }
        let long = |part, len| Ok(Some(LongMessage { at, batches, part, len }));
        if meta > len - at - header {
            return long("header", meta as i64);
        }
        let mut bytes = vec![0u8; meta as usize];
        input.read_exact(&mut bytes)?;
        let Ok(message) = arrow::ipc::root_as_message(&bytes) else { return Ok(None) };
        let body = message.bodyLength();
        if body < 0 || body as u64 > len - at - header - meta {
            return long("body", body);
        }
        batches += usize::from(message.header_type() == arrow::ipc::MessageHeader::RecordBatch);
        input.seek_relative(body)?;
        at += header + meta + body as u64;
    }
}

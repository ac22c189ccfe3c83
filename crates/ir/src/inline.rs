//! Arrow data embedded in JSON plans: Arrow IPC stream bytes in base64.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::ipc_lengths::{first_long_message, LongMessage};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The batches as one base64 string of an Arrow IPC stream (empty string for none).
pub fn encode_batches(batches: &[RecordBatch]) -> Result<String> {
    let Some(first) = batches.first() else {
        return Ok(String::new());
    };
    let mut bytes = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut bytes, &first.schema())?;
        for b in batches {
            w.write(b)?;
        }
        w.finish()?;
    }
    Ok(base64_encode(&bytes))
}

/// The batches of a string made by [`encode_batches`].
pub fn decode_batches(text: &str) -> Result<Vec<RecordBatch>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let bytes = base64_decode(text)?;
    check_lengths(&bytes)?;
    // Arrow's IPC decoder can still panic on some corrupt messages (a buffer slice past its
    // body, a type it does not know); a hand-edited or damaged plan is an error, not a crash.
    let decoded = std::panic::catch_unwind(move || -> Result<Vec<RecordBatch>> {
        let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
        reader.map(|b| b.map_err(Error::from)).collect()
    });
    decoded.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::Serde(format!("in_memory data is not a valid Arrow IPC stream: {message}")))
    })
}

/// Checks that every message's lengths fit in `bytes` before anything is decoded: Arrow's
/// stream reader allocates what they say (800 MB for a damaged plan of a few kilobytes).
fn check_lengths(bytes: &[u8]) -> Result<()> {
    let long = first_long_message(&mut Cursor::new(bytes), bytes.len() as u64)
        .map_err(|e| Error::Serde(format!("in_memory data is not a valid Arrow IPC stream: {e}")))?;
    match long {
        None => Ok(()),
        Some(LongMessage { at, part, len, .. }) => Err(Error::Serde(format!(
            "in_memory data is not a valid Arrow IPC stream: a message at byte {at} has a {part} of {len} bytes, past the data's {} bytes",
            bytes.len()
        ))),
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let bad = || Error::Serde("in_memory data is not valid base64".into());
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(4) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(digits.len() / 4 * 3);
    for quad in digits.chunks(4) {
        let mut n = 0u32;
        let mut pad = 0;
        for &c in quad {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' => {
                    pad += 1;
                    0
                }
                _ => return Err(bad()),
            };
            n = (n << 6) | u32::from(v);
        }
        let full = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&full[..3 - pad.min(2)]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..20u8 {
            let bytes: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE=");
        assert!(base64_decode("TW!u").is_err());
    }
}

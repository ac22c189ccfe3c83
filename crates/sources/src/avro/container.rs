//! Avro object container files: a header (magic `Obj\x01`, a metadata map holding the
//! schema and the codec, a 16-byte sync marker), then blocks, each an object count, a byte
//! size, the (compressed) objects and the sync marker again.
//!
//! Codecs: `null`, `deflate` (raw deflate), `snappy` (with the CRC32 of the uncompressed
//! data after it, checked), `zstandard` and `bzip2`. Decompressed blocks are bounded by
//! [`MAX_BLOCK_BYTES`], so a block that claims to inflate to more is an error, not an
//! allocation.

use std::io::Read;

use super::binary::{Bad, Input};

/// The four bytes every container file starts with.
pub const MAGIC: &[u8; 4] = b"Obj\x01";

/// The largest decompressed block read (the writers' default blocks are 16–64 KiB).
pub const MAX_BLOCK_BYTES: usize = 1 << 30;

/// A block codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Stored as is.
    Null,
    /// Raw deflate (RFC 1951).
    Deflate,
    /// Snappy, followed by the big-endian CRC32 of the uncompressed data.
    Snappy,
    /// Zstandard.
    Zstandard,
    /// bzip2 (libbz2-rs, a pure-Rust port of libbzip2).
    Bzip2,
}

impl Codec {
    /// The codec named in a header (`avro.codec`; absent means `null`).
    pub fn named(name: &str) -> Result<Codec, String> {
        match name {
            "null" | "" => Ok(Codec::Null),
            "deflate" => Ok(Codec::Deflate),
            "snappy" => Ok(Codec::Snappy),
            "zstandard" => Ok(Codec::Zstandard),
            "bzip2" => Ok(Codec::Bzip2),
            other => Err(format!("unknown Avro codec {other:?} (null, deflate, snappy, zstandard and bzip2 are read)")),
        }
    }

    /// Its name in a header.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Null => "null",
            Codec::Deflate => "deflate",
            Codec::Snappy => "snappy",
            Codec::Zstandard => "zstandard",
            Codec::Bzip2 => "bzip2",
        }
    }
}

/// A container file's header.
#[derive(Debug, Clone)]
pub struct Header {
    /// The writer schema's JSON.
    pub schema: String,
    /// The blocks' codec.
    pub codec: Codec,
    /// The marker after every block.
    pub sync: [u8; 16],
    /// Where the first block starts.
    pub data_start: usize,
}

/// Reads the header at the start of `file`.
pub fn header(file: &[u8]) -> Result<Header, Bad> {
    if file.len() < 4 || &file[..4] != MAGIC {
        return Err(Bad { at: 0, what: "not an Avro container file (no Obj\\x01 magic)".into() });
    }
    let mut input = Input::new(&file[4..]);
    let (mut schema, mut codec) = (None, Codec::Null);
    loop {
        let start = input.position() + 4;
        let mut count = input.long().map_err(|b| shift(b, 4))?;
        if count == 0 {
            break;
        }
        if count < 0 {
            // A negative count is followed by the block's byte size.
            count = -count;
            input.long().map_err(|b| shift(b, 4))?;
        }
        for _ in 0..count {
            let key = input.string().map_err(|b| shift(b, 4))?;
            let value = input.bytes().map_err(|b| shift(b, 4))?;
            match key {
                "avro.schema" => {
                    let text = std::str::from_utf8(value)
                        .map_err(|_| Bad { at: start, what: "avro.schema is not UTF-8".into() })?;
                    schema = Some(text.to_string());
                }
                "avro.codec" => {
                    let name = std::str::from_utf8(value).unwrap_or("?");
                    codec = Codec::named(name).map_err(|what| Bad { at: start, what })?;
                }
                _ => {}
            }
        }
    }
    let sync: [u8; 16] = input.fixed(16).map_err(|b| shift(b, 4))?.try_into().expect("16 bytes");
    let schema = schema.ok_or(Bad { at: 4, what: "the header has no avro.schema".into() })?;
    Ok(Header { schema, codec, sync, data_start: input.position() + 4 })
}

fn shift(bad: Bad, by: usize) -> Bad {
    Bad { at: bad.at + by, what: bad.what }
}

/// One block of a file, its objects still compressed.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// The number of objects.
    pub count: usize,
    /// The compressed objects.
    pub data: &'a [u8],
    /// Where the block starts in the file.
    pub offset: usize,
}

/// The block at `offset` of `file` and where the next one starts; `None` at the end.
pub fn block<'a>(file: &'a [u8], offset: usize, sync: &[u8; 16]) -> Result<Option<(Block<'a>, usize)>, Bad> {
    if offset >= file.len() {
        return Ok(None);
    }
    let mut input = Input::new(&file[offset..]);
    let at = |b: Bad| shift(b, offset);
    let count = input.count("an object count of").map_err(at)?;
    let size = input.length("a block size of").map_err(at)?;
    // Every object takes at least one byte, except where the schema encodes to nothing: a
    // count above the block's bytes times eight is corrupt whatever the schema.
    if count > size.saturating_mul(8).max(1 << 20) {
        return Err(Bad { at: offset, what: format!("a block of {size} bytes cannot hold {count} objects") });
    }
    let data = input.fixed(size).map_err(at)?;
    let marker = input.fixed(16).map_err(at)?;
    if marker != sync {
        return Err(Bad { at: offset + input.position() - 16, what: "the sync marker after a block is wrong".into() });
    }
    Ok(Some((Block { count, data, offset }, offset + input.position())))
}

/// `block`'s objects decompressed by `codec` into `out` (cleared first).
pub fn decompress(codec: Codec, data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    match codec {
        Codec::Null => out.extend_from_slice(data),
        Codec::Deflate => bounded(flate2::read::DeflateDecoder::new(data), out)?,
        Codec::Zstandard => bounded(zstd::stream::read::Decoder::new(data).map_err(|e| e.to_string())?, out)?,
        Codec::Bzip2 => bounded(bzip2::read::BzDecoder::new(data), out)?,
        Codec::Snappy => {
            let Some(split) = data.len().checked_sub(4) else {
                return Err("a snappy block without its checksum".into());
            };
            let (compressed, crc) = data.split_at(split);
            let n = snap::raw::decompress_len(compressed).map_err(|e| format!("snappy: {e}"))?;
            if n > MAX_BLOCK_BYTES {
                return Err(format!("a block inflates to {n} bytes, more than {MAX_BLOCK_BYTES}"));
            }
            // The length is allocated before decoding, so it is checked against what the
            // block can make: snappy's densest element, a 3-byte copy, makes 64 bytes.
            if n > compressed.len().saturating_mul(SNAPPY_MAX_RATIO) {
                return Err(format!(
                    "a snappy block of {} bytes claims {n} bytes, more than it can hold",
                    compressed.len()
                ));
            }
            out.resize(n, 0);
            snap::raw::Decoder::new().decompress(compressed, out).map_err(|e| format!("snappy: {e}"))?;
            let expected = u32::from_be_bytes(crc.try_into().expect("four bytes"));
            if crc32fast::hash(out) != expected {
                return Err("a snappy block's checksum does not match its data".into());
            }
        }
    }
    Ok(())
}

/// The most bytes one compressed byte of snappy can stand for (a 3-byte copy element makes
/// at most 64), rounded up.
const SNAPPY_MAX_RATIO: usize = 22;

/// Reads `reader` to its end into `out`, refusing more than [`MAX_BLOCK_BYTES`].
fn bounded(reader: impl Read, out: &mut Vec<u8>) -> Result<(), String> {
    let mut limited = reader.take(MAX_BLOCK_BYTES as u64 + 1);
    limited.read_to_end(out).map_err(|e| format!("corrupt compressed block: {e}"))?;
    if out.len() > MAX_BLOCK_BYTES {
        return Err(format!("a block inflates to more than {MAX_BLOCK_BYTES} bytes"));
    }
    Ok(())
}

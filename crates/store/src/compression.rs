//! The compression codecs of chunk frames.
//!
//! A frame's payload is compressed as one block: LZ4 in its block format (no frame format:
//! the chunk-file frame already carries the lengths and a checksum) or Zstandard at level 3
//! (zstd's default, a good ratio at several hundred MB/s per core). Compressors and
//! decompressors keep their contexts between frames so a file of many small chunks does not
//! pay a context set-up per chunk.

use std::fmt;
use std::io;
use std::str::FromStr;

use flumen_ir::{Error, Result};
use serde::{Deserialize, Serialize};

/// Zstandard's default level: the ratio/speed trade-off most callers expect.
const ZSTD_LEVEL: i32 = 3;

/// The most an LZ4 block can expand: a sequence of 255-byte match-length bytes each adds
/// 255 output bytes. A declared size above this bound is corrupt, and checking it keeps a
/// bad length from turning into a huge allocation.
const LZ4_MAX_RATIO: u64 = 255;

/// How chunk payloads are compressed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Stored as encoded: the fastest to read, the largest on disk.
    None,
    /// LZ4 block compression: fast to write and read, a moderate ratio.
    #[default]
    Lz4,
    /// Zstandard at level 3: a better ratio, slower to write.
    Zstd,
}

impl Compression {
    /// The codec's id in a frame header.
    pub(crate) fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd => 2,
        }
    }

    /// The codec with frame-header id `id`, if there is one.
    pub(crate) fn from_id(id: u8) -> Option<Compression> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// The codec's name as `FromStr` and the snapshot metadata spell it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = Error;

    /// Parses `none`, `lz4` or `zstd` (any case).
    fn from_str(s: &str) -> Result<Compression> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(Error::plan("compression", format!("unknown compression '{s}' (expected none, lz4 or zstd)"))),
        }
    }
}

/// Compresses payloads, keeping codec state and the output buffer between frames.
pub(crate) struct Compressor {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    out: Vec<u8>,
}

impl Compressor {
    pub(crate) fn new() -> Compressor {
        Compressor { zstd: None, out: Vec::new() }
    }

    /// Compresses `raw` with `codec` and returns the compressed bytes; `None` returns `raw`.
    pub(crate) fn compress<'a>(&'a mut self, codec: Compression, raw: &'a [u8]) -> io::Result<&'a [u8]> {
        match codec {
            Compression::None => Ok(raw),
            Compression::Lz4 => {
                let bound = lz4_flex::block::get_maximum_output_size(raw.len());
                // Grown once and reused: resizing from empty every frame would zero it each time.
                if self.out.len() < bound {
                    self.out.resize(bound, 0);
                }
                let n = lz4_flex::block::compress_into(raw, &mut self.out).map_err(io::Error::other)?;
                Ok(&self.out[..n])
            }
            Compression::Zstd => {
                let zstd = match &mut self.zstd {
                    Some(z) => z,
                    None => self.zstd.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
                };
                self.out.clear();
                self.out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                let n = zstd.compress_to_buffer(raw, &mut self.out)?;
                Ok(&self.out[..n])
            }
        }
    }
}

/// Decompresses payloads, keeping the zstd context between frames.
pub(crate) struct Decompressor {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Decompressor {
    pub(crate) fn new() -> Decompressor {
        Decompressor { zstd: None }
    }

    /// Decompresses `stored` (compressed with `codec`, not `None`) into a new buffer of exactly
    /// `raw_len` bytes. The error is a message: the caller knows the file and offset.
    pub(crate) fn decompress(&mut self, codec: Compression, stored: &[u8], raw_len: u64) -> Result<Vec<u8>, String> {
        let size = usize::try_from(raw_len).map_err(|_| format!("decompressed size {raw_len} is too large"))?;
        let out = match codec {
            Compression::None => return Err("a stored payload needs no decompression".to_string()),
            Compression::Lz4 => {
                if raw_len > (stored.len() as u64).saturating_mul(LZ4_MAX_RATIO).saturating_add(64) {
                    return Err(format!("decompressed size {raw_len} is impossible for {} LZ4 bytes", stored.len()));
                }
                lz4_flex::block::decompress(stored, size).map_err(|e| format!("LZ4: {e}"))?
            }
            Compression::Zstd => {
                let zstd = match &mut self.zstd {
                    Some(z) => z,
                    None => self.zstd.insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?),
                };
                let mut out = Vec::new();
                out.try_reserve_exact(size).map_err(|e| format!("cannot allocate {raw_len} bytes: {e}"))?;
                zstd.decompress_to_buffer(stored, &mut out).map_err(|e| format!("zstd: {e}"))?;
                out
            }
        };
        if out.len() != size {
            return Err(format!("decompressed to {} bytes, the frame header says {raw_len}", out.len()));
        }
        Ok(out)
    }
}

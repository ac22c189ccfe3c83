//! The fixed-size parts of a chunk file: the file header and frame headers.

use crate::Compression;

/// The first eight bytes of every chunk file.
pub(crate) const MAGIC: [u8; 8] = *b"FLMCHUNK";
/// The format version this crate writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Bytes in the file header.
pub(crate) const FILE_HEADER_LEN: u64 = 16;
/// Bytes in a frame header.
pub(crate) const FRAME_HEADER_LEN: usize = 32;
/// Bytes in the end frame's payload: chunk count and row count.
pub(crate) const END_PAYLOAD_LEN: u64 = 16;

/// The file header: magic, version, reserved.
pub(crate) fn file_header() -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Checks a file header; the error says what is wrong with it.
pub(crate) fn check_file_header(h: &[u8; FILE_HEADER_LEN as usize]) -> Result<(), String> {
    if h[..8] != MAGIC {
        return Err("not a flumen chunk file (bad magic)".to_string());
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != VERSION {
        return Err(format!("chunk file format version {version} is not supported (this build reads {VERSION})"));
    }
    Ok(())
}

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    Schema,
    Chunk,
    End,
}

impl FrameKind {
    fn id(self) -> u8 {
        match self {
            FrameKind::Schema => 1,
            FrameKind::Chunk => 2,
            FrameKind::End => 3,
        }
    }

    fn from_id(id: u8) -> Option<FrameKind> {
        match id {
            1 => Some(FrameKind::Schema),
            2 => Some(FrameKind::Chunk),
            3 => Some(FrameKind::End),
            _ => None,
        }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub kind: FrameKind,
    pub codec: Compression,
    pub rows: u32,
    pub stored_len: u64,
    pub raw_len: u64,
    pub payload_crc: u32,
}

impl FrameHeader {
    pub(crate) fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut h = [0u8; FRAME_HEADER_LEN];
        h[0] = self.kind.id();
        h[1] = self.codec.id();
        h[4..8].copy_from_slice(&self.rows.to_le_bytes());
        h[8..16].copy_from_slice(&self.stored_len.to_le_bytes());
        h[16..24].copy_from_slice(&self.raw_len.to_le_bytes());
        h[24..28].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&h[..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a frame header; the error says what is wrong with it.
    pub(crate) fn decode(h: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, String> {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if crc32fast::hash(&h[..28]) != u32_at(28) {
            return Err("bad frame header (checksum mismatch)".to_string());
        }
        let kind = FrameKind::from_id(h[0]).ok_or_else(|| format!("bad frame header (unknown frame kind {})", h[0]))?;
        let codec = Compression::from_id(h[1]).ok_or_else(|| format!("bad frame header (unknown codec {})", h[1]))?;
        if h[2] != 0 || h[3] != 0 {
            return Err("bad frame header (reserved bytes are not zero)".to_string());
        }
        let header = FrameHeader {
            kind,
            codec,
            rows: u32_at(4),
            stored_len: u64_at(8),
            raw_len: u64_at(16),
            payload_crc: u32_at(24),
        };
        if codec == Compression::None && header.raw_len != header.stored_len {
            return Err("bad frame header (an uncompressed payload with two lengths)".to_string());
        }
        Ok(header)
    }
}

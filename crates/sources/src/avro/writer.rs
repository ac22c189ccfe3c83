//! Writing Avro container files: for tests, fuzz seeds and `flumen gen-data`, so that what
//! the reader is checked against comes from the data a test made, not from the reader.

use std::fs::File;
use std::io::{BufWriter, Write};

use flumen_ir::{Error, Result};

use super::binary::{put_bytes, put_long};
use super::container::{Codec, MAGIC};

/// A value of an Avro schema, to encode.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    /// `null`.
    Null,
    /// `boolean`.
    Boolean(bool),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `bytes` or `fixed` (a `fixed` writes its bytes without a length: use `Fixed`).
    Bytes(Vec<u8>),
    /// `fixed`.
    Fixed(Vec<u8>),
    /// `string`.
    String(String),
    /// `enum`, by symbol index.
    Enum(i32),
    /// `array`.
    Array(Vec<Datum>),
    /// A union's branch `index` and its value.
    Union(i64, Box<Datum>),
    /// A `record`'s field values, in order.
    Record(Vec<Datum>),
}

impl Datum {
    /// Appends the value's binary encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Datum::Null => {}
            Datum::Boolean(b) => out.push(u8::from(*b)),
            Datum::Int(v) => put_long(out, i64::from(*v)),
            Datum::Long(v) => put_long(out, *v),
            Datum::Float(v) => out.extend_from_slice(&v.to_le_bytes()),
            Datum::Double(v) => out.extend_from_slice(&v.to_le_bytes()),
            Datum::Bytes(b) => put_bytes(out, b),
            Datum::Fixed(b) => out.extend_from_slice(b),
            Datum::String(s) => put_bytes(out, s.as_bytes()),
            Datum::Enum(i) => put_long(out, i64::from(*i)),
            Datum::Array(items) => {
                if !items.is_empty() {
                    put_long(out, items.len() as i64);
                    for item in items {
                        item.encode(out);
                    }
                }
                put_long(out, 0);
            }
            Datum::Union(index, value) => {
                put_long(out, *index);
                value.encode(out);
            }
            Datum::Record(fields) => fields.iter().for_each(|f| f.encode(out)),
        }
    }
}

/// Writes records to an Avro container file in blocks of about `block_bytes` encoded bytes.
pub struct AvroWriter {
    path: String,
    out: BufWriter<File>,
    codec: Codec,
    sync: [u8; 16],
    block: Vec<u8>,
    count: usize,
    block_bytes: usize,
}

impl AvroWriter {
    /// Creates `path` holding records of `schema` (its JSON), blocks compressed by `codec`.
    pub fn create(path: &str, schema: &str, codec: Codec) -> Result<AvroWriter> {
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        let mut out = BufWriter::new(file);
        let mut head = MAGIC.to_vec();
        put_long(&mut head, 2);
        put_bytes(&mut head, b"avro.schema");
        put_bytes(&mut head, schema.as_bytes());
        put_bytes(&mut head, b"avro.codec");
        put_bytes(&mut head, codec.name().as_bytes());
        put_long(&mut head, 0);
        // A marker drawn from the path, so that files differ but tests stay reproducible.
        let seed = crc32fast::hash(path.as_bytes());
        let mut sync = [0u8; 16];
        for (i, b) in sync.iter_mut().enumerate() {
            *b = (seed.rotate_left(i as u32 * 5) as u8) ^ (i as u8).wrapping_mul(37);
        }
        head.extend_from_slice(&sync);
        out.write_all(&head).map_err(|e| Error::io(path, e))?;
        Ok(AvroWriter { path: path.into(), out, codec, sync, block: Vec::new(), count: 0, block_bytes: 64 << 10 })
    }

    /// Closes a block once it holds `bytes` encoded bytes (64 KiB by default).
    pub fn with_block_bytes(mut self, bytes: usize) -> Self {
        self.block_bytes = bytes.max(1);
        self
    }

    /// Appends one record.
    pub fn append(&mut self, record: &Datum) -> Result<()> {
        record.encode(&mut self.block);
        self.count += 1;
        if self.block.len() >= self.block_bytes {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        let data = match self.codec {
            Codec::Null => std::mem::take(&mut self.block),
            Codec::Deflate => {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(&self.block).and_then(|_| e.finish()).map_err(|e| Error::io(&self.path, e))?
            }
            Codec::Zstandard => zstd::bulk::compress(&self.block, 3).map_err(|e| Error::io(&self.path, e))?,
            Codec::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
                e.write_all(&self.block).and_then(|_| e.finish()).map_err(|e| Error::io(&self.path, e))?
            }
            Codec::Snappy => {
                let mut c = snap::raw::Encoder::new()
                    .compress_vec(&self.block)
                    .map_err(|e| Error::io(&self.path, std::io::Error::other(e)))?;
                c.extend_from_slice(&crc32fast::hash(&self.block).to_be_bytes());
                c
            }
        };
        let mut head = Vec::new();
        put_long(&mut head, self.count as i64);
        put_long(&mut head, data.len() as i64);
        let io = |e| Error::io(&self.path, e);
        self.out.write_all(&head).map_err(io)?;
        self.out.write_all(&data).map_err(io)?;
        self.out.write_all(&self.sync).map_err(io)?;
        self.block.clear();
        self.count = 0;
        Ok(())
    }

    /// Writes the last block and closes the file.
    pub fn finish(mut self) -> Result<()> {
        self.flush_block()?;
        let path = self.path.clone();
        self.out.flush().map_err(|e| Error::io(&path, e))
    }
}

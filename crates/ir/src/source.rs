//! Source descriptors: what a dataset reads, with its schema, as the IR sees it.
//!
//! The IR never opens a file. A file source carries the schema that was read or inferred
//! when the dataset was built, so that plans type-check, serialize and fingerprint without
//! touching the disk; `flumen-sources` does the reading.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::Expr;
use crate::inline::{decode_batches, encode_batches};
use crate::spec::{ElementSpec, FieldSpec};

/// Options of the CSV reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsvFormat {
    /// The columns of the file, in order (given or inferred when the dataset was built).
    pub schema: ElementSpec,
    /// The first line is a header.
    pub header: bool,
    /// The field delimiter.
    pub delimiter: char,
    /// Read only these columns, in this order (projection); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
}

/// Options of the Parquet reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParquetFormat {
    /// The file's schema as read from its footer when the dataset was built.
    pub schema: ElementSpec,
    /// Read only these columns, in this order (projection); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// Keep only the rows where this boolean expression over the file's columns holds (a
    /// pushed-down filter): row groups whose statistics prove it false are skipped, the rest
    /// are filtered row by row. The columns it reads need not be projected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate: Option<Expr>,
}

/// Options of the Avro reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AvroFormat {
    /// The fields of the file's writer schema, read from its header when the dataset was
    /// built.
    pub schema: ElementSpec,
    /// Read only these fields, in this order (projection: the others are skipped without
    /// being decoded); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// Read the blocks of all the files in a seeded random order, drawn anew each iteration
    /// (AvroTensorDataset's shuffle of blocks, reproducible); in file order when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_blocks: Option<BlockShuffle>,
    /// The schema (JSON) files are read as (Avro's schema resolution: fields by name or
    /// alias, promoted types, defaults for fields a file lacks); each file's own writer
    /// schema when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_schema: Option<String>,
}

/// A seeded order of the blocks of Avro files: a permutation of every (file, block) drawn
/// from the seed, mixed with the iteration as `shuffle`'s seed is, so that each iteration
/// reads the blocks in another order and the same seed gives the same orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockShuffle {
    /// The seed; the pipeline's own (`Options` seed, or one drawn per dataset) when absent.
    pub seed: Option<u64>,
}

/// Whole-file compression of a record file (tf.data's `compression_type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordCompression {
    /// Not compressed.
    #[default]
    None,
    /// GZIP (`"GZIP"` in tf.data).
    Gzip,
    /// ZLIB (`"ZLIB"` in tf.data).
    Zlib,
}

/// How to read one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "format")]
pub enum FileFormat {
    /// Comma- (or other-) separated values.
    Csv(CsvFormat),
    /// Apache Parquet.
    Parquet(ParquetFormat),
    /// Arrow IPC file format (random access, with footer).
    IpcFile {
        /// The file's schema.
        schema: ElementSpec,
    },
    /// Arrow IPC stream format.
    IpcStream {
        /// The stream's schema.
        schema: ElementSpec,
    },
    /// One element per line, field `line` (string), without the line terminator.
    TextLines,
    /// TFRecord files, one element per record, field `record` (bytes).
    #[serde(rename = "tfrecord", alias = "tf_record")]
    TfRecord {
        /// Whole-file compression.
        #[serde(default)]
        compression: RecordCompression,
    },
    /// Avro object container files, one element per record.
    Avro(AvroFormat),
    /// flumen's checksummed chunk files: snapshot shards and `cache(path)` files.
    Chunks {
        /// The chunks' schema.
        schema: ElementSpec,
    },
}

impl FileFormat {
    /// What is pushed into the reader, for plan displays: `columns [a, b]`, `where p`.
    pub fn pushdown(&self) -> String {
        let (columns, predicate) = match self {
            FileFormat::Csv(c) => (&c.columns, None),
            FileFormat::Parquet(p) => (&p.columns, p.predicate.as_ref()),
            FileFormat::Avro(a) => (&a.columns, None),
            _ => (&None, None),
        };
        let mut parts = Vec::new();
        if let Some(cols) = columns {
            parts.push(format!("columns [{}]", cols.join(", ")));
        }
        if let Some(p) = predicate {
            parts.push(format!("where {p}"));
        }
        parts.join(", ")
    }

    /// The short name of the format (`csv`, `parquet`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            FileFormat::Csv(_) => "csv",
            FileFormat::Parquet(_) => "parquet",
            FileFormat::IpcFile { .. } => "ipc_file",
            FileFormat::IpcStream { .. } => "ipc_stream",
            FileFormat::TextLines => "text_lines",
            FileFormat::TfRecord { .. } => "tfrecord",
            FileFormat::Avro(_) => "avro",
            FileFormat::Chunks { .. } => "chunks",
        }
    }

    /// The spec of the elements read: the schema restricted to the projected columns.
    pub fn output_spec(&self) -> Result<ElementSpec> {
        let (schema, columns) = match self {
            FileFormat::Csv(c) => (&c.schema, &c.columns),
            FileFormat::Parquet(p) => (&p.schema, &p.columns),
            FileFormat::Avro(a) => (&a.schema, &a.columns),
            FileFormat::IpcFile { schema } | FileFormat::IpcStream { schema } | FileFormat::Chunks { schema } => {
                (schema, &None)
            }
            FileFormat::TextLines => return ElementSpec::new(vec![FieldSpec::scalar("line", DType::Utf8)]),
            FileFormat::TfRecord { .. } => return ElementSpec::new(vec![FieldSpec::scalar("record", DType::Binary)]),
        };
        if let FileFormat::Csv(c) = self {
            if let Some(f) = c.schema.fields.iter().find(|f| !f.is_scalar()) {
                return Err(Error::plan("csv", format!("CSV columns are scalars, but the schema has {f}")));
            }
        }
        match columns {
            None => Ok(schema.clone()),
            Some(cols) => {
                let fields =
                    cols.iter().map(|c| schema.require(c, self.name()).cloned()).collect::<Result<Vec<_>>>()?;
                let spec = ElementSpec { fields, batch_dims: 0 };
                spec.check_unique(self.name())?;
                Ok(spec)
            }
        }
    }
}

/// In-memory data embedded in a plan (serialized as base64 Arrow IPC).
#[derive(Debug, Clone, PartialEq)]
pub struct InlineData {
    /// The chunks, all with the schema of `spec`.
    pub batches: Arc<Vec<RecordBatch>>,
}

impl Serialize for InlineData {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        encode_batches(&self.batches).map_err(serde::ser::Error::custom)?.serialize(s)
    }
}

impl<'de> Deserialize<'de> for InlineData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let batches = decode_batches(&text).map_err(serde::de::Error::custom)?;
        Ok(InlineData { batches: Arc::new(batches) })
    }
}

/// Where a dataset's elements come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum SourceDesc {
    /// `range(start, stop, step)`: field `value` (int64).
    Range {
        /// First value.
        start: i64,
        /// End (exclusive).
        stop: i64,
        /// Increment (non-zero; negative counts down).
        step: i64,
    },
    /// Arrow data held in memory; each row is an element.
    InMemory {
        /// The element spec (equal to the batches' schema).
        spec: ElementSpec,
        /// The data.
        data: InlineData,
    },
    /// A registered Rust iterator of chunks with a declared spec.
    Generator {
        /// The registry name.
        name: String,
        /// The declared spec.
        spec: ElementSpec,
        /// True when registered without a name: the plan cannot be serialized.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        anonymous: bool,
        /// Declared stateful: what its iterators yield depends on the iterators made and
        /// read before (a queue, a stream read once), so it is read no further than asked.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stateful: bool,
    },
    /// The files matching `pattern`, sorted, as field `filename` (string); optionally shuffled
    /// with a seed (reshuffled each iteration, as tf.data's `list_files`).
    ListFiles {
        /// The glob the files were found with.
        pattern: String,
        /// The matching files, sorted, resolved when the dataset was built.
        files: Vec<String>,
        /// Shuffle the order each iteration.
        shuffle: bool,
        /// The shuffle seed (random when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// The splits of `files` in `format` (a Parquet row group or an Avro block in field
    /// `row_group`, or a whole file otherwise),
    /// one element each: fields `file` (string) and `row_group` (int64, `-1` for a whole
    /// file). `shard` and `interleave(read_split)` work on these units.
    Splits {
        /// The files, in order.
        files: Vec<String>,
        /// Their format.
        format: FileFormat,
    },
    /// The records of `files`, read one file after another in `format`.
    Files {
        /// The files, in reading order.
        files: Vec<String>,
        /// How to read them.
        format: FileFormat,
    },
}

impl SourceDesc {
    /// The operator name shown in plans.
    pub fn name(&self) -> String {
        match self {
            SourceDesc::Range { .. } => "range".into(),
            SourceDesc::InMemory { .. } => "in_memory".into(),
            SourceDesc::Generator { .. } => "generator".into(),
            SourceDesc::ListFiles { .. } => "list_files".into(),
            SourceDesc::Splits { format, .. } => format!("{}_splits", format.name()),
            SourceDesc::Files { format, .. } => format.name().into(),
        }
    }

    /// The spec of the elements this source produces.
    pub fn output_spec(&self) -> Result<ElementSpec> {
        match self {
            SourceDesc::Range { step, .. } => {
                if *step == 0 {
                    return Err(Error::plan("range", "step must not be zero"));
                }
                ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)])
            }
            SourceDesc::InMemory { spec, data } => {
                let schema = spec.arrow_schema();
                for b in data.batches.iter() {
                    if b.schema().fields() != schema.fields() {
                        return Err(Error::plan(
                            "in_memory",
                            format!("a batch has schema {:?}, the spec says {}", b.schema(), spec),
                        ));
                    }
                }
                Ok(spec.clone())
            }
            SourceDesc::Generator { spec, .. } => Ok(spec.clone()),
            SourceDesc::ListFiles { .. } => ElementSpec::new(vec![FieldSpec::scalar("filename", DType::Utf8)]),
            SourceDesc::Splits { format, .. } => {
                format.output_spec()?;
                ElementSpec::new(vec![
                    FieldSpec::scalar("file", DType::Utf8),
                    FieldSpec::scalar("row_group", DType::Int64),
                ])
            }
            SourceDesc::Files { format, .. } => format.output_spec(),
        }
    }

    /// The number of elements, when it is known without reading.
    pub fn cardinality(&self) -> Option<u64> {
        match self {
            SourceDesc::Range { start, stop, step } => {
                // i128: `stop - start` overflows i64 for extreme bounds.
                let (start, stop, step) = (i128::from(*start), i128::from(*stop), i128::from(*step));
                let span = if step > 0 { stop - start } else { start - stop };
                let step = step.abs();
                Some(if span <= 0 { 0 } else { ((span + step - 1) / step) as u64 })
            }
            SourceDesc::InMemory { data, .. } => Some(data.batches.iter().map(|b| b.num_rows() as u64).sum()),
            SourceDesc::ListFiles { files, .. } => Some(files.len() as u64),
            SourceDesc::Splits { format: FileFormat::Parquet(_) | FileFormat::Avro(_), .. } => None,
            SourceDesc::Splits { files, .. } => Some(files.len() as u64),
            SourceDesc::Generator { .. } | SourceDesc::Files { .. } => None,
        }
    }
}

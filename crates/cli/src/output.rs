//! What `flumen run` writes of the elements it reads: a file (`--output`) in Arrow IPC
//! stream, Parquet or JSON-lines form, and a content checksum (`--checksum`).
//!
//! IPC streams keep one record batch per element, so a batched dataset's batches stay
//! batches; Parquet holds the elements' rows (a batched element's rows in turn). JSON lines
//! hold one object per element: an unbatched element's fields, or a batched one's fields as
//! arrays of its rows, as `as_numpy_iterator` would give them. The checksum hashes those
//! JSON lines, so it depends on the values only, not on how they lie in memory (chunking,
//! views, slices): two runs of one pipeline under any options can be compared by it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use flumen::crates::ir::fingerprint::Fnv1a;
use flumen_store::publish::TempFile;
use parquet::arrow::ArrowWriter;
use serde_json::{Map, Value};

/// The form of an output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Arrow IPC stream: one record batch per element.
    Ipc,
    /// Parquet: the elements' rows.
    Parquet,
    /// JSON lines: one object per element.
    Jsonl,
}

impl OutputFormat {
    /// The form `path`'s extension names (`.arrows`, `.arrow`, `.ipc`; `.parquet`; `.jsonl`,
    /// `.json`).
    pub fn of(path: &Path) -> Result<OutputFormat, String> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("arrows" | "arrow" | "ipc") => Ok(OutputFormat::Ipc),
            Some("parquet") => Ok(OutputFormat::Parquet),
            Some("jsonl" | "json") => Ok(OutputFormat::Jsonl),
            _ => Err(format!(
                "cannot tell the output form of {} from its extension (.arrows, .parquet, .jsonl): give --output-format",
                path.display()
            )),
        }
    }
}

/// An output file being written: to a temporary file beside its path, published under the
/// path only when the run ends well ([`Output::finish`]), so that a failed or killed run
/// never leaves a file that looks complete (nor replaces what was there before).
pub struct Output {
    writer: Writer,
    temp: TempFile,
}

/// The writer of an output's form.
enum Writer {
    /// An Arrow IPC stream.
    Ipc(StreamWriter<BufWriter<File>>),
    /// A Parquet file.
    Parquet(ArrowWriter<File>),
    /// JSON lines.
    Jsonl(BufWriter<File>),
}

fn failed(path: &Path) -> impl Fn(String) -> String + '_ {
    move |e| format!("cannot write {}: {e}", path.display())
}

impl Output {
    /// Starts `path` to hold elements of `schema` in `format`.
    pub fn create(path: &Path, format: OutputFormat, schema: &SchemaRef) -> Result<Output, String> {
        let (temp, file) = TempFile::create(path).map_err(|e| failed(path)(e.to_string()))?;
        let writer = match format {
            OutputFormat::Ipc => Writer::Ipc(
                StreamWriter::try_new(BufWriter::new(file), schema).map_err(|e| failed(path)(e.to_string()))?,
            ),
            OutputFormat::Parquet => Writer::Parquet(
                ArrowWriter::try_new(file, schema.clone(), None).map_err(|e| failed(path)(e.to_string()))?,
            ),
            OutputFormat::Jsonl => Writer::Jsonl(BufWriter::new(file)),
        };
        Ok(Output { writer, temp })
    }

    /// Whether [`Output::write`] needs each element's JSON line.
    pub fn writes_lines(&self) -> bool {
        matches!(self.writer, Writer::Jsonl(_))
    }

    /// Writes one element; `line` is its JSON line (see [`json_line`]), which JSON-lines
    /// output needs ([`Output::writes_lines`]).
    pub fn write(&mut self, element: &RecordBatch, line: Option<&str>) -> Result<(), String> {
        match &mut self.writer {
            Writer::Ipc(w) => w.write(element).map_err(|e| e.to_string()),
            Writer::Parquet(w) => w.write(element).map_err(|e| e.to_string()),
            Writer::Jsonl(w) => {
                let line = line.ok_or("JSON-lines output needs each element's JSON line")?;
                writeln!(w, "{line}").map_err(|e| e.to_string())
            }
        }
    }

    /// Finishes the file (footers, buffers), syncs it and publishes it under its path,
    /// replacing what was there.
    pub fn finish(self, path: &Path) -> Result<(), String> {
        let file = match self.writer {
            Writer::Ipc(w) => w.into_inner().map_err(|e| e.to_string())?.into_inner().map_err(|e| e.to_string())?,
            Writer::Parquet(w) => w.into_inner().map_err(|e| e.to_string())?,
            Writer::Jsonl(w) => w.into_inner().map_err(|e| e.to_string())?,
        };
        file.sync_all().map_err(|e| e.to_string())?;
        self.temp.publish_replace(path).map_err(|e| e.to_string())
    }
}

/// An element as one JSON object: its row's fields, or, for an element of `batched`
/// dataset, each field as the array of its rows' values.
pub fn json_line(element: &RecordBatch, batched: bool) -> Result<String, String> {
    let mut writer = arrow::json::ArrayWriter::new(Vec::new());
    writer.write(element).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    let rows: Vec<Map<String, Value>> =
        serde_json::from_slice(&writer.into_inner()).map_err(|e| format!("an element as JSON: {e}"))?;
    let object = if batched {
        let mut fields = Map::new();
        for field in element.schema().fields() {
            let values = rows.iter().map(|r| r.get(field.name()).cloned().unwrap_or(Value::Null)).collect();
            fields.insert(field.name().clone(), Value::Array(values));
        }
        fields
    } else {
        rows.into_iter().next().unwrap_or_default()
    };
    Ok(Value::Object(object).to_string())
}

/// The checksum of the elements seen so far: 128-bit FNV-1a over their JSON lines.
#[derive(Default)]
pub struct Checksum(Fnv1a);

impl Checksum {
    /// Adds an element's JSON line.
    pub fn add(&mut self, line: &str) {
        self.0.update(line.as_bytes());
        self.0.update(b"\n");
    }

    /// The checksum as 32 hex digits.
    pub fn hex(&self) -> String {
        format!("{:032x}", self.0.value())
    }
}

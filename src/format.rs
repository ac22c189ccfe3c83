//! File formats as users describe them, resolved to IR formats (with schemas) when a
//! dataset is built.

use flumen_ir::{AvroFormat, BlockShuffle, CsvFormat, ElementSpec, Error, FileFormat, ParquetFormat, Result};

use crate::function::FileRead;

/// How to read CSV files.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvOptions {
    /// The first line is a header (default true).
    pub header: bool,
    /// The field delimiter (default `,`).
    pub delimiter: char,
    /// The columns; inferred from the first file when absent.
    pub schema: Option<ElementSpec>,
    /// Read only these columns, in this order.
    pub columns: Option<Vec<String>>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions { header: true, delimiter: ',', schema: None, columns: None }
    }
}

impl CsvOptions {
    /// The same options reading only `columns`.
    pub fn with_columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// The same options with a given schema (no inference).
    pub fn with_schema(mut self, schema: ElementSpec) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The same options with `header` set.
    pub fn with_header(mut self, header: bool) -> Self {
        self.header = header;
        self
    }

    /// The same options with `delimiter` set.
    pub fn with_delimiter(mut self, delimiter: char) -> Self {
        self.delimiter = delimiter;
        self
    }
}

/// How `Dataset::avro` reads Avro container files.
#[derive(Debug, Clone, Default)]
pub struct AvroOptions {
    /// Fields to read, in this order (all when absent): the others are skipped without
    /// being decoded.
    pub columns: Option<Vec<String>>,
    /// The fields as ATDS's feature specs describe them, instead of as the writer schema
    /// gives them: a dense field of fixed shape from (nested) arrays, every length checked
    /// (`FieldSpec::tensor`), a sparse field from a record of `indices0..`
    /// and `values` arrays (`FieldSpec::sparse`), a ragged field from arrays of any lengths
    /// (`FieldSpec::ragged`). Checked against the first file's schema when the dataset is
    /// built.
    pub features: Option<ElementSpec>,
    /// Read the blocks of all the files in a seeded random order, drawn anew each iteration
    /// (AvroTensorDataset's shuffle of blocks, but reproducible). Records keep their order
    /// within a block: follow with `shuffle(buffer)` to mix records too (see
    /// [`AvroOptions::with_shuffled_blocks`]).
    pub shuffle_blocks: Option<BlockShuffle>,
    /// A reader schema (JSON, a record) to read every file as, whatever schema it was
    /// written with (Avro's schema resolution): a field is read from the writer field of its
    /// name or of one of its `aliases`, promoted where the types differ (int to long, float
    /// or double; long to float or double; float to double; string and bytes either way),
    /// or filled from its `default` where a file lacks it. Files written with different
    /// schemas that resolve to it are read in one dataset. The fields (or `features`) are
    /// the reader schema's.
    pub reader_schema: Option<String>,
}

impl AvroOptions {
    /// Reads every file as the reader schema `json` says (see [`AvroOptions::reader_schema`]).
    pub fn with_reader_schema(mut self, json: impl Into<String>) -> Self {
        self.reader_schema = Some(json.into());
        self
    }

    /// Reads the blocks of all the files in an order drawn from `seed` (the pipeline's seed
    /// when `None`), reshuffled each iteration. Blocks are the unit: a block of `n` records
    /// gives them together, in file order, so a record-level `shuffle(buffer)` after the
    /// read should hold several blocks' records to mix them (w3's blocks hold about 60).
    pub fn with_shuffled_blocks(mut self, seed: Option<u64>) -> Self {
        self.shuffle_blocks = Some(BlockShuffle { seed });
        self
    }

    /// Reads only `columns`.
    pub fn with_columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// Reads the fields of `features` as they say.
    pub fn with_features(mut self, features: ElementSpec) -> Self {
        self.features = Some(features);
        self
    }
}

/// The IR format of `read`, reading schemas from `sample` (the first file) where needed.
pub fn resolve(read: &FileRead, sample: Option<&str>) -> Result<FileFormat> {
    let sample = || {
        sample.ok_or_else(|| {
            Error::plan("read_file", "the file schema is not given and there is no listed file to read it from")
        })
    };
    Ok(match read {
        FileRead::Format(f) => f.clone(),
        FileRead::Csv(o) => {
            let mut format = match &o.schema {
                Some(schema) => {
                    CsvFormat { schema: schema.clone(), header: o.header, delimiter: o.delimiter, columns: None }
                }
                None => flumen_sources::csv::infer_csv(sample()?, o.header, o.delimiter)?,
            };
            format.columns = o.columns.clone();
            FileFormat::Csv(format)
        }
        FileRead::Parquet { columns } => {
            let mut format: ParquetFormat = flumen_sources::parquet::parquet_format(sample()?)?;
            format.columns = columns.clone();
            FileFormat::Parquet(format)
        }
        FileRead::IpcFile => FileFormat::IpcFile { schema: flumen_sources::ipc::ipc_file_schema(sample()?)? },
        FileRead::IpcStream => FileFormat::IpcStream { schema: flumen_sources::ipc::ipc_stream_schema(sample()?)? },
        FileRead::TextLines => FileFormat::TextLines,
        FileRead::TfRecord(compression) => FileFormat::TfRecord { compression: *compression },
        FileRead::Avro(o) => FileFormat::Avro(AvroFormat {
            schema: flumen_sources::avro::reader::avro_spec(
                sample()?,
                o.features.as_ref(),
                o.reader_schema.as_deref(),
            )?,
            columns: o.columns.clone(),
            shuffle_blocks: o.shuffle_blocks,
            reader_schema: o.reader_schema.clone(),
        }),
        FileRead::Chunks => FileFormat::Chunks { schema: flumen_sources::chunks::chunks_schema(sample()?)? },
    })
}

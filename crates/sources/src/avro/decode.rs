//! Decoding a block's records straight into Arrow columns of the element spec, without a
//! value per record: each field of the writer schema either appends to its column or, when
//! the plan does not read it, is walked over without being kept.

use std::sync::Arc;

use arrow::array::BooleanBufferBuilder;
use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, ListArray, NullBufferBuilder, PrimitiveArray, RecordBatch,
    RecordBatchOptions, StringArray,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type, SchemaRef,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use flumen_ir::{ElementSpec, FieldKind, FieldSpec};

use super::binary::{Bad, Input};
use super::schema::{default_at, Field, Type};

/// Decodes records of one writer schema into chunks of an element spec.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Each writer field's type and where its values go.
    fields: Vec<(Type, Target)>,
    /// Columns the writer schema lacks, filled from the reader schema's defaults: the
    /// column, the default's type and its encoding.
    defaults: Vec<(usize, Type, Vec<u8>)>,
    spec: ElementSpec,
    schema: SchemaRef,
}

impl Decoder {
    /// A decoder of records of `writer` (a record schema) into chunks of `spec`, whose
    /// fields are some of the record's, in any order.
    pub fn new(writer: &Type, spec: &ElementSpec) -> Result<Decoder, String> {
        Decoder::resolve(writer, None, spec)
    }

    /// A decoder of records of `writer` into chunks of `spec`, resolved against the fields
    /// of a reader schema when there is one (Avro's schema resolution): each spec field is
    /// read from the writer field of its name or of one of the reader field's aliases,
    /// promoted where the types differ (int to long, float or double; long to float or
    /// double; float to double; string and bytes either way), and filled from the reader
    /// field's default where the writer has neither.
    pub fn resolve(writer: &Type, reader: Option<&Type>, spec: &ElementSpec) -> Result<Decoder, String> {
        let Type::Record(fields) = writer else { return Err("the schema is not a record".into()) };
        let reader = match reader {
            Some(Type::Record(reader)) => Some(reader.as_slice()),
            Some(_) => return Err("the reader schema is not a record".into()),
            None => None,
        };
        // The writer's types as the reader reads them: its enums resolved against the
        // reader's, wherever the two schemas have the same field.
        let fields = match reader {
            Some(reader) => resolve_fields(fields, reader),
            None => fields.clone(),
        };
        // Each spec field's flattened path in the writer schema, or the default it is
        // filled from.
        let mut names = Vec::with_capacity(spec.fields.len());
        let mut defaults = Vec::new();
        for (c, f) in spec.fields.iter().enumerate() {
            let source = match reader {
                Some(reader) => {
                    locate(reader, Some(&fields), &f.name).map_err(|why| format!("field {:?}: {why}", f.name))?
                }
                None if has_path(&fields, &f.name) => Source::Writer(f.name.clone()),
                None => return Err(format!("the file has no field {:?}", f.name)),
            };
            match source {
                Source::Writer(path) => names.push(Some(path)),
                Source::Default(t, bytes) => {
                    fits(f, &t).map_err(|why| format!("field {:?}: {why}", f.name))?;
                    defaults.push((c, t, bytes));
                    names.push(None);
                }
            }
        }
        let column = |name: &str| names.iter().position(|n| n.as_deref() == Some(name));
        let mut found = vec![false; spec.fields.len()];
        let fields = fields
            .iter()
            .map(|f| Ok((f.t.clone(), target(&f.name, &f.t, spec, &column, &mut found)?)))
            .collect::<Result<Vec<_>, String>>()?;
        if let Some(c) = names.iter().zip(&found).position(|(n, found)| n.is_some() && !found) {
            let name = names[c].as_deref().unwrap_or_default();
            return Err(format!("the file's field {name:?} cannot be read as {:?}", spec.fields[c].name));
        }
        Ok(Decoder { fields, defaults, spec: spec.clone(), schema: spec.arrow_schema() })
    }

    /// The Arrow schema of the chunks.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Columns to append records to, empty.
    pub fn columns(&self) -> Columns {
        Columns { builders: self.spec.fields.iter().map(Builder::of_field).collect(), rows: 0 }
    }

    /// Appends records `from..to` of the `count` records in `data` (a decompressed block)
    /// to `columns`, walking over the records before `from`. When `to` is `count`, bytes
    /// after the last record are an error too. On an error, `columns` keeps the records
    /// before the bad one, and the [`Failure`] says whether reading can go on after it.
    pub fn append(
        &self,
        columns: &mut Columns,
        data: &[u8],
        count: usize,
        from: usize,
        to: usize,
    ) -> Result<(), Failure> {
        let mut input = Input::new(data);
        for record in 0..from {
            self.walk(&mut input).map_err(|bad| Failure::at(record, bad, false))?;
        }
        for record in from..to {
            let start = input.position();
            for (t, target) in &self.fields {
                if let Err(bad) = read(t, target, &mut columns.builders, &mut input) {
                    columns.truncate();
                    // A record whose values do not fit the spec but whose bytes are whole
                    // can be walked over: reading goes on at the next one.
                    let mut again = Input::new(data);
                    again.fixed(start).expect("the record starts within the block");
                    let walkable = self.walk(&mut again).is_ok();
                    return Err(Failure::at(record, bad, walkable));
                }
            }
            for (c, t, default) in &self.defaults {
                let filled = columns.builders[*c].append(t, &mut Input::new(default));
                if let Err(bad) = filled {
                    columns.truncate();
                    return Err(Failure::at(record, bad, true));
                }
            }
            columns.rows += 1;
        }
        if to == count && input.remaining() > 0 {
            let bad = Bad {
                at: input.position(),
                what: format!("{} bytes after the block's {count} records", input.remaining()),
            };
            return Err(Failure { record: count, bad, walkable: false });
        }
        Ok(())
    }

    /// Walks over one record.
    fn walk(&self, input: &mut Input) -> Result<(), Bad> {
        self.fields.iter().try_for_each(|(t, _)| skip(t, input, false))
    }

    /// The chunk of the records appended to `columns`.
    pub fn finish(&self, columns: Columns) -> RecordBatch {
        let arrays: Vec<ArrayRef> =
            columns.builders.into_iter().zip(self.schema.fields()).map(|(b, f)| b.finish(f.data_type())).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(columns.rows));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .expect("the columns are built for the schema, one value per record")
    }

    /// The chunk of the `count` records in `data` (a decompressed block).
    #[cfg(test)]
    pub fn decode(&self, data: &[u8], count: usize) -> Result<RecordBatch, Bad> {
        let mut columns = self.columns();
        self.append(&mut columns, data, count, 0, count).map_err(|f| f.bad)?;
        Ok(self.finish(columns))
    }
}

/// Where a writer field's values go: nowhere (walked over), a column, the columns of a
/// nested record's fields (read as flattened names, `parent.child`), or a map's keys and
/// values columns (`map.keys`, `map.values`: a list of each per element).
#[derive(Debug, Clone)]
enum Target {
    Skip,
    Column(usize),
    Record(Vec<Target>),
    Map { keys: Option<usize>, values: Option<usize> },
}

/// Whether the writer `fields` have the (dotted) field `name`: a field, a nested record's
/// field, or a map's `keys` or `values`.
fn has_path(fields: &[Field], name: &str) -> bool {
    fields.iter().any(|Field { name: n, t, .. }| {
        n == name
            || name.strip_prefix(n.as_str()).and_then(|rest| rest.strip_prefix('.')).is_some_and(|rest| match t {
                Type::Record(inner) => has_path(inner, rest),
                Type::Map(_) => rest == "keys" || rest == "values",
                _ => false,
            })
    })
}

/// Where a spec field's values come from under a reader schema.
enum Source {
    /// The writer's field of this flattened path.
    Writer(String),
    /// The reader's default: a value of this type, encoded.
    Default(Type, Vec<u8>),
}

/// The source of the flattened reader column `path` (`a.b.c`): the writer field the reader's
/// field of that path is (found by name or by one of its aliases, at every level), or the
/// reader's default for the outermost field the writer lacks (the part of it the column
/// holds). `writer` is `None` below a field the writer lacks.
fn locate(reader: &[Field], writer: Option<&[Field]>, path: &str) -> Result<Source, String> {
    let (head, rest) = path.split_once('.').unwrap_or((path, ""));
    let r = reader.iter().find(|r| r.name == head).ok_or_else(|| format!("the reader schema has no field {head:?}"))?;
    let w =
        writer.and_then(|w| std::iter::once(&r.name).chain(&r.aliases).find_map(|n| w.iter().find(|f| f.name == *n)));
    let Some(w) = w else {
        let default = r
            .default
            .as_ref()
            .ok_or_else(|| format!("the file has no field {:?} and the reader schema gives it no default", r.name))?;
        let (t, bytes) = default_at(&r.t, default, rest).map_err(|why| format!("{:?}'s default: {why}", r.name))?;
        return Ok(Source::Default(t, bytes));
    };
    if rest.is_empty() {
        return Ok(Source::Writer(w.name.clone()));
    }
    match (&r.t, &w.t) {
        (Type::Record(inner), Type::Record(written)) => match locate(inner, Some(written), rest)? {
            Source::Writer(below) => Ok(Source::Writer(format!("{}.{below}", w.name))),
            default => Ok(default),
        },
        (Type::Map(_), Type::Map(_)) => Ok(Source::Writer(format!("{}.{rest}", w.name))),
        (_, t) => Err(format!("the file's field {:?} is Avro {t:?}, where the reader has a record or map", w.name)),
    }
}

/// The writer's `fields` with their types as the reader's fields of the same names (or
/// aliases) read them ([`resolve_type`]).
fn resolve_fields(fields: &[Field], reader: &[Field]) -> Vec<Field> {
    fields
        .iter()
        .map(|f| {
            let read = reader.iter().find(|r| r.name == f.name || r.aliases.contains(&f.name));
            match read {
                Some(r) => Field { t: resolve_type(&f.t, &r.t), ..f.clone() },
                None => f.clone(),
            }
        })
        .collect()
}

/// The writer type `t` as the reader type `r` reads it: each enum's symbols mapped to the
/// reader's (a symbol the reader lacks to the reader enum's default, or to an error without
/// one), through arrays, maps, records and union branches (a writer branch read as the
/// reader's first branch of its kind). Everything else stays as written: promotions are
/// made as values are decoded.
fn resolve_type(t: &Type, r: &Type) -> Type {
    let same_kind = |a: &Type, b: &Type| std::mem::discriminant(a) == std::mem::discriminant(b);
    match (t, r) {
        (Type::Enum { symbols, .. }, Type::Enum { symbols: read, default }) => Type::ResolvedEnum {
            written: symbols.clone(),
            read: symbols.iter().map(|s| if read.contains(s) { Some(s.clone()) } else { default.clone() }).collect(),
        },
        (Type::Array(item), Type::Array(read)) => Type::Array(Box::new(resolve_type(item, read))),
        (Type::Map(value), Type::Map(read)) => Type::Map(Box::new(resolve_type(value, read))),
        (Type::Record(fields), Type::Record(read)) => Type::Record(resolve_fields(fields, read)),
        (Type::Union(branches), r) => Type::Union(branches.iter().map(|b| resolve_type(b, r)).collect()),
        (t, Type::Union(read)) => match read.iter().find(|b| same_kind(t, b)) {
            Some(b) => resolve_type(t, b),
            None => t.clone(),
        },
        _ => t.clone(),
    }
}

/// The reader's symbol of a value of a [`Type::ResolvedEnum`], read from `input`.
fn resolved_symbol<'t>(t: &'t Type, input: &mut Input) -> Result<&'t str, Bad> {
    let Type::ResolvedEnum { written, read } = t else { unreachable!("a resolved enum") };
    let at = input.position();
    let i = input.long()?;
    match read.get(i as usize) {
        Some(Some(symbol)) => Ok(symbol),
        Some(None) => Err(Bad {
            at,
            what: format!("enum symbol {:?} is not in the reader's enum, which has no default", written[i as usize]),
        }),
        None => Err(Bad { at, what: format!("enum index {i} of {}", read.len()) }),
    }
}

/// The target of the writer field `name` of type `t`: the spec column `column(name)` reads
/// it, checked to fit, or its parts when it is a record or a map; `found` marks the columns
/// given a field.
fn target(
    name: &str,
    t: &Type,
    spec: &ElementSpec,
    column: &dyn Fn(&str) -> Option<usize>,
    found: &mut [bool],
) -> Result<Target, String> {
    let mut take = |c: usize, t: &Type| -> Result<usize, String> {
        let f = &spec.fields[c];
        fits(f, t).map_err(|why| format!("field {:?}: {why}", f.name))?;
        if std::mem::replace(&mut found[c], true) {
            return Err(format!("two of the file's fields would be read as {:?}", f.name));
        }
        Ok(c)
    };
    if let Some(c) = column(name) {
        return Ok(Target::Column(take(c, t)?));
    }
    Ok(match t {
        Type::Record(fields) => {
            let parts = fields
                .iter()
                .map(|f| target(&format!("{name}.{}", f.name), &f.t, spec, column, found))
                .collect::<Result<Vec<_>, _>>()?;
            match parts.iter().all(|p| matches!(p, Target::Skip)) {
                true => Target::Skip,
                false => Target::Record(parts),
            }
        }
        Type::Map(value) => {
            let keys =
                column(&format!("{name}.keys")).map(|c| take(c, &Type::Array(Box::new(Type::String)))).transpose()?;
            let values = column(&format!("{name}.values")).map(|c| take(c, &Type::Array(value.clone()))).transpose()?;
            match (keys, values) {
                (None, None) => Target::Skip,
                (keys, values) => Target::Map { keys, values },
            }
        }
        _ => Target::Skip,
    })
}

/// Reads one value of the writer type `t` into the columns `target` says.
fn read(t: &Type, target: &Target, builders: &mut [Builder], input: &mut Input) -> Result<(), Bad> {
    match (target, t) {
        // A field nobody reads still resolves: a symbol the reader's enum lacks is an error.
        (Target::Skip, _) => skip(t, input, true),
        (Target::Column(c), _) => builders[*c].append(t, input),
        (Target::Record(parts), Type::Record(fields)) => {
            fields.iter().zip(parts).try_for_each(|(f, part)| read(&f.t, part, builders, input))
        }
        (Target::Map { keys, values }, Type::Map(value)) => {
            let at = input.position();
            let n = each_block(input, |input, count| {
                for _ in 0..count {
                    match keys {
                        Some(k) => builders[*k].list_item(&Type::String, input)?,
                        None => drop(input.bytes()?),
                    }
                    match values {
                        Some(v) => builders[*v].list_item(value, input)?,
                        None => skip(value, input, true)?,
                    }
                }
                Ok(())
            })?;
            [keys, values].into_iter().flatten().try_for_each(|c| builders[*c].end_list(n, at))
        }
        (target, t) => unreachable!("a target {target:?} for a value of {t:?}"),
    }
}

/// What [`Builder::append`] says of a value whose type its column was not made for (a
/// union branch that does not resolve), before it reads any of the value's bytes.
const NOT_MADE_FOR: &str = "a value of a type the column was not made for";

/// Why appending records stopped: the bad record (the block's record count for bytes after
/// the last one), what was wrong, and whether its bytes could be walked over, so that the
/// records after it can still be read.
#[derive(Debug)]
pub struct Failure {
    /// The index of the bad record in its block.
    pub record: usize,
    /// What was wrong, at which byte of the decompressed block.
    pub bad: Bad,
    /// Whether the records after it can be read.
    pub walkable: bool,
}

impl Failure {
    fn at(record: usize, bad: Bad, walkable: bool) -> Self {
        let bad = Bad { at: bad.at, what: format!("record {record} of the block: {}", bad.what) };
        Failure { record, bad, walkable }
    }
}

/// Columns being built from records, possibly of several blocks.
pub struct Columns {
    builders: Vec<Builder>,
    /// The whole records appended.
    rows: usize,
}

impl Columns {
    /// The whole records appended.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Drops what a record that failed half-way appended.
    fn truncate(&mut self) {
        let rows = self.rows;
        self.builders.iter_mut().for_each(|b| b.truncate(rows));
    }
}

/// A column being built.
struct Builder {
    nulls: NullBufferBuilder,
    values: Values,
    /// A string column: bytes promoted into it are checked to be UTF-8.
    utf8: bool,
}

enum Values {
    Bool(BooleanBufferBuilder),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    /// Strings or bytes: offsets and data.
    Bytes(Vec<i32>, Vec<u8>),
    /// Decimals, unscaled.
    Decimal(Vec<i128>),
    /// A list: offsets and the items' column.
    List(Vec<i32>, Box<Builder>),
    /// A fixed-size dimension: its size and the items' column.
    Fixed(usize, Box<Builder>),
    /// A sparse tensor from a record of `indices0..` arrays and a `values` array.
    Sparse(Box<Sparse>),
}

/// A sparse column being built: per element, its entries' coordinates and values.
struct Sparse {
    /// The dense shape, to check coordinates against.
    shape: Vec<i64>,
    /// The element's entries so far (offsets into `coords` / rank).
    entries: Vec<i32>,
    /// Coordinates, `rank` per entry.
    coords: Vec<i64>,
    values: Builder,
    /// The record being read's indices, per dimension (kept to reuse their memory).
    indices: Vec<Vec<i64>>,
}

impl Builder {
    fn of_field(field: &FieldSpec) -> Builder {
        if field.kind != FieldKind::Sparse {
            return Builder::of(&field.arrow_type());
        }
        let values = Builder::of(&field.dtype.to_arrow());
        let indices = vec![Vec::new(); field.shape.len()];
        let sparse = Sparse { shape: field.shape.clone(), entries: vec![0], coords: Vec::new(), values, indices };
        Builder { nulls: NullBufferBuilder::new(0), values: Values::Sparse(Box::new(sparse)), utf8: false }
    }

    fn of(dt: &DataType) -> Builder {
        let values = match dt {
            DataType::Boolean => Values::Bool(BooleanBufferBuilder::new(0)),
            DataType::Int32 | DataType::Date32 => Values::Int32(Vec::new()),
            DataType::Int64 | DataType::Time64(_) | DataType::Timestamp(..) => Values::Int64(Vec::new()),
            DataType::Decimal128(..) => Values::Decimal(Vec::new()),
            DataType::Float32 => Values::Float32(Vec::new()),
            DataType::Float64 => Values::Float64(Vec::new()),
            DataType::List(item) => Values::List(vec![0], Box::new(Builder::of(item.data_type()))),
            DataType::FixedSizeList(item, n) => Values::Fixed(*n as usize, Box::new(Builder::of(item.data_type()))),
            // Utf8 and Binary: the schema mapping gives nothing else.
            _ => Values::Bytes(vec![0], Vec::new()),
        };
        Builder { nulls: NullBufferBuilder::new(0), values, utf8: *dt == DataType::Utf8 }
    }

    /// Decodes one value of `t` from `input` into this column.
    fn append(&mut self, t: &Type, input: &mut Input) -> Result<(), Bad> {
        let (inner, nullable) = t.nullable();
        if let (Type::Union(branches), false) = (t, nullable) {
            // Avro's resolution of a writer union against the reader's type: each value is
            // read by its branch; a branch that does not resolve to this column's type is
            // that record's error (its bytes are whole, so reading goes on after it).
            let at = input.position();
            let branch = input.long()?;
            let Some(taken) = branches.get(branch as usize) else {
                return Err(Bad { at, what: format!("union branch {branch} of {}", branches.len()) });
            };
            if *taken == Type::Null {
                self.push_null();
                return Ok(());
            }
            return self.append(taken, input).map_err(|bad| match bad.what == NOT_MADE_FOR {
                true => {
                    Bad { at, what: format!("union branch {branch} ({taken:?}) does not resolve to the field's type") }
                }
                false => bad,
            });
        }
        if nullable {
            let Type::Union(branches) = t else { unreachable!("nullable types are unions") };
            let at = input.position();
            let branch = input.long()?;
            match branches.get(branch as usize) {
                Some(Type::Null) => {
                    self.push_null();
                    return Ok(());
                }
                Some(_) => {}
                None => return Err(Bad { at, what: format!("union branch {branch} of {}", branches.len()) }),
            }
        }
        let at = input.position();
        match (&mut self.values, inner) {
            (Values::Bool(b), Type::Boolean) => b.append(input.boolean()?),
            (Values::Int32(v), Type::Int | Type::Date) => v.push(input.int()?),
            (Values::Int64(v), Type::Long | Type::TimeMicros | Type::TimestampMicros) => v.push(input.long()?),
            (Values::Int64(v), Type::TimeMillis) => v.push(i64::from(input.int()?) * 1000),
            (Values::Int64(v), Type::TimestampMillis) => {
                let millis = input.long()?;
                v.push(millis.checked_mul(1000).ok_or(Bad { at, what: format!("timestamp {millis} ms overflows") })?)
            }
            (Values::Float32(v), Type::Float) => v.push(input.float()?),
            (Values::Float64(v), Type::Double) => v.push(input.double()?),
            (Values::Int64(v), Type::Int) => v.push(i64::from(input.int()?)),
            (Values::Float32(v), Type::Int) => v.push(input.int()? as f32),
            (Values::Float32(v), Type::Long) => v.push(input.long()? as f32),
            (Values::Float64(v), Type::Int) => v.push(f64::from(input.int()?)),
            (Values::Float64(v), Type::Long) => v.push(input.long()? as f64),
            (Values::Float64(v), Type::Float) => v.push(f64::from(input.float()?)),
            (Values::Bytes(offsets, data), Type::String) => {
                data.extend_from_slice(input.string()?.as_bytes());
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Bytes) => {
                let bytes = input.bytes()?;
                if self.utf8 && std::str::from_utf8(bytes).is_err() {
                    return Err(Bad { at, what: "bytes read as a string are not UTF-8".into() });
                }
                data.extend_from_slice(bytes);
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Decimal(v), Type::Decimal { size, .. }) => {
                let bytes = match size {
                    Some(n) => input.fixed(*n)?,
                    None => input.bytes()?,
                };
                v.push(unscaled(bytes).ok_or(Bad { at, what: format!("a decimal of {} bytes", bytes.len()) })?);
            }
            (Values::Bytes(offsets, data), Type::Decimal { size: None, .. }) => {
                data.extend_from_slice(input.bytes()?);
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Fixed(n) | Type::Decimal { size: Some(n), .. }) => {
                data.extend_from_slice(input.fixed(*n)?);
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Enum { symbols, .. }) => {
                let i = input.long()?;
                let symbol =
                    symbols.get(i as usize).ok_or(Bad { at, what: format!("enum index {i} of {}", symbols.len()) })?;
                data.extend_from_slice(symbol.as_bytes());
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::ResolvedEnum { .. }) => {
                let symbol = resolved_symbol(inner, input)?;
                data.extend_from_slice(symbol.as_bytes());
                push_offset(offsets, data.len(), at)?;
            }
            (Values::List(offsets, items), Type::Array(item)) => {
                let n = each_block(input, |input, count| items.append_run(item, input, count))?;
                let last = *offsets.last().expect("offsets start at 0") as usize;
                push_offset(offsets, last + n, at)?;
            }
            (Values::Fixed(size, items), Type::Array(item)) => {
                let mut n = 0usize;
                each_block(input, |input, count| {
                    n += count;
                    match n <= *size {
                        true => items.append_run(item, input, count),
                        false => {
                            Err(Bad { at, what: format!("an array of more than the {size} values its shape says") })
                        }
                    }
                })?;
                if n != *size {
                    return Err(Bad { at, what: format!("an array of {n} values where its shape says {size}") });
                }
            }
            (Values::Sparse(sparse), Type::Record(fields)) => sparse.append(fields, input, at)?,
            _ => return Err(Bad { at, what: NOT_MADE_FOR.into() }),
        }
        self.nulls.append_non_null();
        Ok(())
    }

    /// Appends `count` values of `t` one after another (an array block's items): floats and
    /// doubles, most of a feature vector's bytes, as one run of bytes, and longs without the
    /// per-value dispatch of [`Builder::append`].
    fn append_run(&mut self, t: &Type, input: &mut Input, count: usize) -> Result<(), Bad> {
        let at = input.position();
        let too_many = || Bad { at, what: format!("an array block of {count} items") };
        match (&mut self.values, t) {
            (Values::Float32(v), Type::Float) => {
                let bytes = input.fixed(count.checked_mul(4).ok_or_else(too_many)?)?;
                v.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("four bytes"))));
            }
            (Values::Float64(v), Type::Double) => {
                let bytes = input.fixed(count.checked_mul(8).ok_or_else(too_many)?)?;
                v.extend(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("eight bytes"))));
            }
            (Values::Int64(v), Type::Long) => {
                v.reserve(count.min(input.remaining()));
                for _ in 0..count {
                    v.push(input.long()?);
                }
            }
            _ => return (0..count).try_for_each(|_| self.append(t, input)),
        }
        self.nulls.append_n_non_nulls(count);
        Ok(())
    }

    /// Appends one item of `t` to this list column's current list (a map's key or value).
    fn list_item(&mut self, t: &Type, input: &mut Input) -> Result<(), Bad> {
        match &mut self.values {
            Values::List(_, items) => items.append(t, input),
            _ => unreachable!("map keys and values are list columns"),
        }
    }

    /// Ends this list column's current list, of `n` items.
    fn end_list(&mut self, n: usize, at: usize) -> Result<(), Bad> {
        let Values::List(offsets, _) = &mut self.values else { unreachable!("map keys and values are list columns") };
        let last = *offsets.last().expect("offsets start at 0") as usize;
        push_offset(offsets, last + n, at)?;
        self.nulls.append_non_null();
        Ok(())
    }

    fn push_null(&mut self) {
        self.nulls.append_null();
        match &mut self.values {
            Values::Bool(b) => b.append(false),
            Values::Int32(v) => v.push(0),
            Values::Int64(v) => v.push(0),
            Values::Float32(v) => v.push(0.0),
            Values::Float64(v) => v.push(0.0),
            Values::Decimal(v) => v.push(0),
            Values::Bytes(offsets, _) | Values::List(offsets, _) => {
                offsets.push(*offsets.last().expect("offsets start at 0"))
            }
            Values::Fixed(size, items) => (0..*size).for_each(|_| items.push_null()),
            Values::Sparse(sparse) => sparse.entries.push(*sparse.entries.last().expect("offsets start at 0")),
        }
    }

    /// Keeps the first `rows` values: what a record that failed half-way appended goes.
    fn truncate(&mut self, rows: usize) {
        self.nulls.truncate(rows);
        match &mut self.values {
            Values::Bool(b) => b.truncate(rows),
            Values::Int32(v) => v.truncate(rows),
            Values::Int64(v) => v.truncate(rows),
            Values::Float32(v) => v.truncate(rows),
            Values::Float64(v) => v.truncate(rows),
            Values::Decimal(v) => v.truncate(rows),
            Values::Bytes(offsets, data) => {
                offsets.truncate(rows + 1);
                data.truncate(offsets[rows] as usize);
            }
            Values::List(offsets, items) => {
                offsets.truncate(rows + 1);
                items.truncate(offsets[rows] as usize);
            }
            Values::Fixed(size, items) => items.truncate(rows * *size),
            Values::Sparse(sparse) => {
                sparse.entries.truncate(rows + 1);
                let entries = sparse.entries[rows] as usize;
                sparse.coords.truncate(entries * sparse.shape.len());
                sparse.values.truncate(entries);
            }
        }
    }

    fn finish(mut self, dt: &DataType) -> ArrayRef {
        let nulls = self.nulls.finish();
        match (self.values, dt) {
            (Values::Bool(mut b), _) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            (Values::Int32(v), DataType::Date32) => {
                Arc::new(PrimitiveArray::<Date32Type>::new(ScalarBuffer::from(v), nulls))
            }
            (Values::Int32(v), _) => Arc::new(PrimitiveArray::<Int32Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Int64(v), DataType::Time64(_)) => {
                Arc::new(PrimitiveArray::<Time64MicrosecondType>::new(ScalarBuffer::from(v), nulls))
            }
            (Values::Int64(v), DataType::Timestamp(_, zone)) => Arc::new(
                PrimitiveArray::<TimestampMicrosecondType>::new(ScalarBuffer::from(v), nulls)
                    .with_timezone_opt(zone.clone()),
            ),
            (Values::Int64(v), _) => Arc::new(PrimitiveArray::<Int64Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Float32(v), _) => Arc::new(PrimitiveArray::<Float32Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Float64(v), _) => Arc::new(PrimitiveArray::<Float64Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Decimal(v), DataType::Decimal128(precision, scale)) => Arc::new(
                PrimitiveArray::<Decimal128Type>::new(ScalarBuffer::from(v), nulls)
                    .with_precision_and_scale(*precision, *scale)
                    .expect("the dtype's precision and scale are valid"),
            ),
            (Values::Bytes(offsets, data), DataType::Utf8) => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
                // SAFETY: every string was checked to be UTF-8 as it was decoded
                // (`Input::string`; enum symbols are Rust strings), and the offsets are
                // ascending within `data`.
                Arc::new(unsafe { StringArray::new_unchecked(offsets, data.into(), nulls) })
            }
            (Values::Bytes(offsets, data), _) => {
                Arc::new(BinaryArray::new(OffsetBuffer::new(ScalarBuffer::from(offsets)), data.into(), nulls))
            }
            (Values::List(offsets, items), DataType::List(field)) => {
                let items = items.finish(field.data_type());
                Arc::new(ListArray::new(field.clone(), OffsetBuffer::new(ScalarBuffer::from(offsets)), items, nulls))
            }
            (Values::Fixed(size, items), DataType::FixedSizeList(field, _)) => {
                let items = items.finish(field.data_type());
                Arc::new(FixedSizeListArray::new(field.clone(), size as i32, items, nulls))
            }
            (Values::Sparse(sparse), DataType::Struct(parts)) => sparse.finish(parts, nulls),
            (Values::List(..) | Values::Fixed(..) | Values::Sparse(_) | Values::Decimal(_), other) => {
                unreachable!("a nested column of type {other}")
            }
        }
    }
}

impl Sparse {
    /// One element from the record `fields`: `indices0..indices{rank-1}` (arrays of longs)
    /// and `values` (an array), in any order, other fields skipped.
    fn append(&mut self, fields: &[Field], input: &mut Input, at: usize) -> Result<(), Bad> {
        let mut indices = std::mem::take(&mut self.indices);
        indices.iter_mut().for_each(Vec::clear);
        let done = self.append_with(&mut indices, fields, input, at);
        self.indices = indices;
        done
    }

    /// [`Sparse::append`], reading the indices into `indices` (one list per dimension).
    fn append_with(
        &mut self,
        indices: &mut [Vec<i64>],
        fields: &[Field],
        input: &mut Input,
        at: usize,
    ) -> Result<(), Bad> {
        let rank = self.shape.len();
        let mut values = 0usize;
        for Field { name, t, .. } in fields {
            let dim = name.strip_prefix("indices").and_then(|d| d.parse::<usize>().ok()).filter(|d| *d < rank);
            match (dim, name.as_str(), t) {
                (Some(d), _, Type::Array(item)) if **item == Type::Long => {
                    each_block(input, |input, count| {
                        let index = &mut indices[d];
                        index.reserve(count.min(input.remaining()));
                        (0..count).try_for_each(|_| {
                            index.push(input.long()?);
                            Ok(())
                        })
                    })?;
                }
                (None, "values", Type::Array(item)) => {
                    values += each_block(input, |input, count| self.values.append_run(item, input, count))?;
                }
                _ => skip(t, input, true)?,
            }
        }
        for (d, index) in indices.iter().enumerate() {
            if index.len() != values {
                return Err(Bad { at, what: format!("indices{d} has {} entries and values {values}", index.len()) });
            }
            if let Some(&bad) = index.iter().find(|&&i| i < 0 || (self.shape[d] >= 0 && i >= self.shape[d])) {
                return Err(Bad { at, what: format!("index {bad} of indices{d} is outside [0, {})", self.shape[d]) });
            }
        }
        for entry in 0..values {
            self.coords.extend(indices.iter().map(|index| index[entry]));
        }
        let end = i32::try_from(self.coords.len() / rank.max(1))
            .map_err(|_| Bad { at, what: "a block's sparse column passes 2^31 entries".into() })?;
        self.entries.push(end);
        Ok(())
    }

    /// The column in flumen's sparse layout ([`flumen_ir::sparse`]); a dense shape the field
    /// leaves unknown is the smallest that holds the element's entries.
    fn finish(self, parts: &arrow::datatypes::Fields, nulls: Option<arrow::buffer::NullBuffer>) -> ArrayRef {
        let DataType::List(value_item) = parts[1].data_type() else { unreachable!("a sparse column's values") };
        let dense_shapes = flumen_ir::sparse::smallest_dense_shapes(&self.shape, &self.entries, &self.coords);
        let sparse = flumen_ir::sparse::SparseParts {
            offsets: OffsetBuffer::new(ScalarBuffer::from(self.entries)),
            coords: self.coords,
            values: self.values.finish(value_item.data_type()),
            dense_shapes,
        };
        Arc::new(flumen_ir::sparse::build(parts, sparse, nulls).expect("the parts of a checked sparse column"))
    }
}

/// Whether values of the writer type `t` can be read as `field`: the same scalar type, an
/// array per dimension of a dense or ragged field, a record of `indices0..` and `values`
/// arrays for a sparse one.
fn fits(field: &FieldSpec, t: &Type) -> Result<(), String> {
    let (t, _) = t.nullable();
    let scalar = |t: &Type| match (field.dtype, t) {
        (flumen_ir::DType::Bool, Type::Boolean)
        | (flumen_ir::DType::Int32, Type::Int)
        | (flumen_ir::DType::Int64, Type::Long)
        // Logical types, and the two whose values are their dtype's unscaled.
        | (flumen_ir::DType::Date32 | flumen_ir::DType::Int32, Type::Date)
        | (flumen_ir::DType::TimeMicros, Type::TimeMillis | Type::TimeMicros)
        | (flumen_ir::DType::TimestampMicros, Type::TimestampMillis | Type::TimestampMicros)
        | (flumen_ir::DType::Int64, Type::TimeMicros | Type::TimestampMicros)
        | (flumen_ir::DType::Binary, Type::Decimal { .. }) => Ok(()),
        (flumen_ir::DType::Decimal128 { precision, scale }, Type::Decimal { precision: p, scale: s, .. })
            if (precision, scale) == (*p, *s) =>
        {
            Ok(())
        }
        (flumen_ir::DType::Float32, Type::Float)
        | (flumen_ir::DType::Float64, Type::Double)
        | (flumen_ir::DType::Utf8, Type::String | Type::Enum { .. } | Type::ResolvedEnum { .. })
        | (flumen_ir::DType::Binary, Type::Bytes | Type::Fixed(_)) => Ok(()),
        // Avro's promotions.
        (flumen_ir::DType::Int64, Type::Int)
        | (flumen_ir::DType::Float32, Type::Int | Type::Long)
        | (flumen_ir::DType::Float64, Type::Int | Type::Long | Type::Float)
        | (flumen_ir::DType::Utf8, Type::Bytes)
        | (flumen_ir::DType::Binary, Type::String) => Ok(()),
        (dtype, other) => Err(format!("{} values cannot be read from Avro {other:?}", dtype.name())),
    };
    // A union other than `["null", T]` resolves value by value (`Builder::append`): it fits
    // when one of its branches does, and a value of another branch is its record's error.
    let scalar = |t: &Type| match t {
        Type::Union(branches) if !branches.iter().any(|b| *b != Type::Null && scalar(b).is_ok()) => {
            Err(format!("no branch of the union {branches:?} can be read as {}", field.dtype.name()))
        }
        Type::Union(_) => Ok(()),
        t => scalar(t),
    };
    if field.kind == FieldKind::Sparse {
        let Type::Record(parts) = t else { return Err("a sparse feature is a record of indices0.. and values".into()) };
        for d in 0..field.shape.len() {
            let name = format!("indices{d}");
            match parts.iter().find(|f| f.name == name).map(|f| &f.t) {
                Some(Type::Array(item)) if **item == Type::Long => {}
                _ => return Err(format!("a sparse feature's record needs {name}, an array of longs")),
            }
        }
        return match parts.iter().find(|f| f.name == "values").map(|f| &f.t) {
            Some(Type::Array(item)) => scalar(item.nullable().0),
            _ => Err("a sparse feature's record needs values, an array".into()),
        };
    }
    let mut t = t;
    for _ in &field.shape {
        match t {
            Type::Array(item) => t = item.nullable().0,
            other => return Err(format!("a dimension of its shape is not an Avro array but {other:?}")),
        }
    }
    scalar(t)
}

/// A big-endian two's complement integer of at most 16 bytes (a decimal's unscaled value).
fn unscaled(bytes: &[u8]) -> Option<i128> {
    if bytes.len() > 16 {
        return None;
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(wide))
}

fn push_offset(offsets: &mut Vec<i32>, end: usize, at: usize) -> Result<(), Bad> {
    let end = i32::try_from(end).map_err(|_| Bad { at, what: "a block's column passes 2 GiB".into() })?;
    offsets.push(end);
    Ok(())
}

/// Calls `block` with the item count of each block of an array, one after another, to read
/// that many items; the array's item count.
fn each_block(input: &mut Input, mut block: impl FnMut(&mut Input, usize) -> Result<(), Bad>) -> Result<usize, Bad> {
    let mut n = 0;
    loop {
        let count = array_block(input)?;
        if count == 0 {
            return Ok(n);
        }
        block(input, count)?;
        n += count;
    }
}

/// The item count of the next block of an array (or map), reading past the byte size a
/// negative count carries.
fn array_block(input: &mut Input) -> Result<usize, Bad> {
    let at = input.position();
    let count = input.long()?;
    let count = if count < 0 {
        input.long()?;
        count.checked_neg().ok_or(Bad { at, what: "an array block count overflows".into() })?
    } else {
        count
    };
    // Each item takes at least a byte, or nothing at all for null items: bound the count by
    // what could be left so that a corrupt count fails fast rather than spinning.
    match usize::try_from(count) {
        Ok(n) if n <= input.remaining().max(1).saturating_mul(8).max(1 << 20) => Ok(n),
        _ => Err(Bad { at, what: format!("an array block of {count} items in {} bytes", input.remaining()) }),
    }
}

/// Walks over one value of `t` without keeping it; `resolving` checks that each enum
/// symbol has a reading in the reader's enum (skipping a field nobody reads), else only the
/// bytes are walked (finding where a record ends).
fn skip(t: &Type, input: &mut Input, resolving: bool) -> Result<(), Bad> {
    match t {
        Type::Null => {}
        Type::Boolean => {
            input.fixed(1)?;
        }
        Type::ResolvedEnum { .. } if resolving => {
            resolved_symbol(t, input)?;
        }
        Type::Int
        | Type::Long
        | Type::Enum { .. }
        | Type::ResolvedEnum { .. }
        | Type::Date
        | Type::TimeMillis
        | Type::TimeMicros
        | Type::TimestampMillis
        | Type::TimestampMicros => {
            input.long()?;
        }
        Type::Float => {
            input.fixed(4)?;
        }
        Type::Double => {
            input.fixed(8)?;
        }
        Type::Bytes | Type::String => {
            input.bytes()?;
        }
        Type::Fixed(n) | Type::Decimal { size: Some(n), .. } => {
            input.fixed(*n)?;
        }
        Type::Decimal { size: None, .. } => {
            input.bytes()?;
        }
        Type::Array(item) => loop {
            let at = input.position();
            let count = input.long()?;
            if count == 0 {
                break;
            }
            if count < 0 {
                // A block with its byte size: jump over it.
                let size = input.length("an array block of")?;
                input.fixed(size)?;
                continue;
            }
            let n = usize::try_from(count).map_err(|_| Bad { at, what: "an array block count".into() })?;
            // Items of one size (floats, doubles, fixed) are jumped over at once, and varints
            // counted by their last bytes.
            let size = match &**item {
                Type::Float => Some(4),
                Type::Double => Some(8),
                Type::Fixed(size) | Type::Decimal { size: Some(size), .. } => Some(*size),
                _ => None,
            };
            match (size, &**item) {
                (Some(size), _) => {
                    let bytes = n.checked_mul(size).ok_or(Bad { at, what: "an array block count".into() })?;
                    input.fixed(bytes)?;
                }
                (None, Type::ResolvedEnum { .. }) if resolving => (0..n).try_for_each(|_| skip(item, input, true))?,
                (None, t) if t.is_varint() => input.skip_varints(n)?,
                (None, _) => (0..n).try_for_each(|_| skip(item, input, resolving))?,
            }
        },
        Type::Map(value) => loop {
            let count = input.long()?;
            if count == 0 {
                break;
            }
            if count < 0 {
                let size = input.length("a map block of")?;
                input.fixed(size)?;
                continue;
            }
            for _ in 0..count {
                input.bytes()?;
                skip(value, input, resolving)?;
            }
        },
        Type::Record(fields) => {
            for f in fields {
                skip(&f.t, input, resolving)?;
            }
        }
        Type::Union(branches) => {
            let at = input.position();
            let i = input.long()?;
            let branch =
                branches.get(i as usize).ok_or(Bad { at, what: format!("union branch {i} of {}", branches.len()) })?;
            skip(branch, input, resolving)?;
        }
    }
    Ok(())
}

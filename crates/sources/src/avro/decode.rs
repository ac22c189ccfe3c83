//! Decoding a block's records straight into Arrow columns of the element spec, without a
//! value per record: each field of the writer schema either appends to its column or, when
//! the plan does not read it, is walked over without being kept.

use std::sync::Arc;

use arrow::array::BooleanBufferBuilder;
use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, ListArray, NullBufferBuilder, PrimitiveArray, RecordBatch, RecordBatchOptions,
    StringArray,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type, SchemaRef};
use flumen_ir::ElementSpec;

use super::binary::{Bad, Input};
use super::schema::Type;

/// Decodes records of one writer schema into chunks of an element spec.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Each writer field's type and, when read, its column in the output.
    fields: Vec<(Type, Option<usize>)>,
    schema: SchemaRef,
}

impl Decoder {
    /// A decoder of records of `writer` (a record schema) into chunks of `spec`, whose
    /// fields are some of the record's, in any order.
    pub fn new(writer: &Type, spec: &ElementSpec) -> Result<Decoder, String> {
        let Type::Record(fields) = writer else { return Err("the schema is not a record".into()) };
        let mut out = Vec::with_capacity(fields.len());
        for (name, t) in fields {
            out.push((t.clone(), spec.fields.iter().position(|f| &f.name == name)));
        }
        for f in &spec.fields {
            if !fields.iter().any(|(name, _)| name == &f.name) {
                return Err(format!("the file has no field {:?}", f.name));
            }
        }
        Ok(Decoder { fields: out, schema: spec.arrow_schema() })
    }

    /// The chunk of the `count` records in `data` (a decompressed block).
    pub fn decode(&self, data: &[u8], count: usize) -> Result<RecordBatch, Bad> {
        let mut columns: Vec<Builder> = self.schema.fields().iter().map(|f| Builder::of(f.data_type())).collect();
        let mut input = Input::new(data);
        for _ in 0..count {
            for (t, column) in &self.fields {
                match column {
                    Some(c) => columns[*c].append(t, &mut input)?,
                    None => skip(t, &mut input)?,
                }
            }
        }
        if input.remaining() > 0 {
            return Err(Bad {
                at: input.position(),
                what: format!("{} bytes after the block's {count} records", input.remaining()),
            });
        }
        let arrays: Vec<ArrayRef> =
            columns.into_iter().zip(self.schema.fields()).map(|(b, f)| b.finish(f.data_type())).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(count));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(|e| Bad { at: 0, what: e.to_string() })
    }
}

/// A column being built.
struct Builder {
    nulls: NullBufferBuilder,
    values: Values,
}

enum Values {
    Bool(BooleanBufferBuilder),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    /// Strings or bytes: offsets and data.
    Bytes(Vec<i32>, Vec<u8>),
    /// A list: offsets and the items' column.
    List(Vec<i32>, Box<Builder>),
}

impl Builder {
    fn of(dt: &DataType) -> Builder {
        let values = match dt {
            DataType::Boolean => Values::Bool(BooleanBufferBuilder::new(0)),
            DataType::Int32 => Values::Int32(Vec::new()),
            DataType::Int64 => Values::Int64(Vec::new()),
            DataType::Float32 => Values::Float32(Vec::new()),
            DataType::Float64 => Values::Float64(Vec::new()),
            DataType::List(item) => Values::List(vec![0], Box::new(Builder::of(item.data_type()))),
            // Utf8 and Binary: the schema mapping gives nothing else.
            _ => Values::Bytes(vec![0], Vec::new()),
        };
        Builder { nulls: NullBufferBuilder::new(0), values }
    }

    /// Decodes one value of `t` from `input` into this column.
    fn append(&mut self, t: &Type, input: &mut Input) -> Result<(), Bad> {
        let (inner, nullable) = t.nullable();
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
            (Values::Int32(v), Type::Int) => v.push(input.int()?),
            (Values::Int64(v), Type::Long) => v.push(input.long()?),
            (Values::Float32(v), Type::Float) => v.push(input.float()?),
            (Values::Float64(v), Type::Double) => v.push(input.double()?),
            (Values::Bytes(offsets, data), Type::String) => {
                data.extend_from_slice(input.string()?.as_bytes());
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Bytes) => {
                data.extend_from_slice(input.bytes()?);
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Fixed(n)) => {
                data.extend_from_slice(input.fixed(*n)?);
                push_offset(offsets, data.len(), at)?;
            }
            (Values::Bytes(offsets, data), Type::Enum(symbols)) => {
                let i = input.long()?;
                let symbol =
                    symbols.get(i as usize).ok_or(Bad { at, what: format!("enum index {i} of {}", symbols.len()) })?;
                data.extend_from_slice(symbol.as_bytes());
                push_offset(offsets, data.len(), at)?;
            }
            (Values::List(offsets, items), Type::Array(item)) => {
                let mut n = 0usize;
                loop {
                    let count = array_block(input)?;
                    if count == 0 {
                        break;
                    }
                    for _ in 0..count {
                        items.append(item, input)?;
                    }
                    n += count;
                }
                let last = *offsets.last().expect("offsets start at 0") as usize;
                push_offset(offsets, last + n, at)?;
            }
            _ => return Err(Bad { at, what: "a value of a type the column was not made for".into() }),
        }
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
            Values::Bytes(offsets, _) | Values::List(offsets, _) => {
                offsets.push(*offsets.last().expect("offsets start at 0"))
            }
        }
    }

    fn finish(mut self, dt: &DataType) -> ArrayRef {
        let nulls = self.nulls.finish();
        match (self.values, dt) {
            (Values::Bool(mut b), _) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            (Values::Int32(v), _) => Arc::new(PrimitiveArray::<Int32Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Int64(v), _) => Arc::new(PrimitiveArray::<Int64Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Float32(v), _) => Arc::new(PrimitiveArray::<Float32Type>::new(ScalarBuffer::from(v), nulls)),
            (Values::Float64(v), _) => Arc::new(PrimitiveArray::<Float64Type>::new(ScalarBuffer::from(v), nulls)),
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
            (Values::List(..), other) => unreachable!("a list column of type {other}"),
        }
    }
}

fn push_offset(offsets: &mut Vec<i32>, end: usize, at: usize) -> Result<(), Bad> {
    let end = i32::try_from(end).map_err(|_| Bad { at, what: "a block's column passes 2 GiB".into() })?;
    offsets.push(end);
    Ok(())
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

/// Walks over one value of `t` without keeping it.
fn skip(t: &Type, input: &mut Input) -> Result<(), Bad> {
    match t {
        Type::Null => {}
        Type::Boolean => {
            input.fixed(1)?;
        }
        Type::Int | Type::Long | Type::Enum(_) => {
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
        Type::Fixed(n) => {
            input.fixed(*n)?;
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
            for _ in 0..n {
                skip(item, input)?;
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
                skip(value, input)?;
            }
        },
        Type::Record(fields) => {
            for (_, f) in fields {
                skip(f, input)?;
            }
        }
        Type::Union(branches) => {
            let at = input.position();
            let i = input.long()?;
            let branch =
                branches.get(i as usize).ok_or(Bad { at, what: format!("union branch {i} of {}", branches.len()) })?;
            skip(branch, input)?;
        }
    }
    Ok(())
}

//! Avro schemas (the JSON in a container file's header) as a typed tree, and the element
//! spec they give: a record's fields become the element's fields.
//!
//! Mapping: `boolean`, `int`, `long`, `float`, `double`, `string`, `bytes` to the dtype of
//! that name (`int` is int32); the logical types `date` to `date32`, `time-millis` and
//! `time-micros` to `time64_us`, `timestamp-millis` and `timestamp-micros` to `timestamp_us`
//! (UTC), milliseconds scaled to microseconds; `decimal` (up to 38 digits) to `decimal128`;
//! `uuid` and local timestamps as their underlying type (string, long); `enum` to its symbol as a string; `fixed` to bytes; an array
//! to a ragged field one dimension deeper (arrays of arrays nest); `["null", T]` (either
//! order) to a nullable `T`. A nested record's fields become fields of their own, named
//! `record.field` (flattened, recursively); a map becomes two list fields, `map.keys`
//! (strings) and `map.values`. Other unions are read where a features spec gives their dtype
//! (value by value, by Avro's resolution: a value of a branch that does not resolve to it is
//! its record's error); without one they are refused when the dataset is built, naming the
//! field, as are nullable records and maps and arrays of records or maps.

use std::collections::HashMap;

use flumen_ir::{DType, ElementSpec, FieldSpec};
use serde_json::Value;

/// An Avro type.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// `null`.
    Null,
    /// `boolean`.
    Boolean,
    /// `int` (32 bits).
    Int,
    /// `long`.
    Long,
    /// `int` with logical type `date`: days since 1970-01-01.
    Date,
    /// `int` with logical type `time-millis`: milliseconds after midnight.
    TimeMillis,
    /// `long` with logical type `time-micros`: microseconds after midnight.
    TimeMicros,
    /// `long` with logical type `timestamp-millis`: milliseconds since the epoch (UTC).
    TimestampMillis,
    /// `long` with logical type `timestamp-micros`: microseconds since the epoch (UTC).
    TimestampMicros,
    /// `bytes` (or `fixed` of `size` bytes) with logical type `decimal`: a big-endian two's
    /// complement unscaled integer.
    Decimal {
        /// Digits in all.
        precision: u8,
        /// Digits after the point.
        scale: i8,
        /// The `fixed` size; `None` for `bytes`.
        size: Option<usize>,
    },
    /// `float`.
    Float,
    /// `double`.
    Double,
    /// `bytes`.
    Bytes,
    /// `string`.
    String,
    /// `fixed` of this many bytes.
    Fixed(usize),
    /// `enum`: its symbols, and the symbol a reader reads a writer's unknown symbol as (the
    /// enum's own `default`, Avro 1.9).
    Enum {
        /// The symbols, by index.
        symbols: Vec<String>,
        /// The reader's reading of a symbol it lacks.
        default: Option<String>,
    },
    /// A writer's `enum` as a reader schema reads it (made by schema resolution, never
    /// parsed).
    ResolvedEnum {
        /// The writer's symbols, by index.
        written: Vec<String>,
        /// Per writer index, the reader's symbol; `None` where the reader has no symbol for
        /// it and no default (that value's record is an error).
        read: Vec<Option<String>>,
    },
    /// `array` of items.
    Array(Box<Type>),
    /// `map` from strings to values.
    Map(Box<Type>),
    /// `record` with named fields, in order.
    Record(Vec<Field>),
    /// A union of branches, chosen per value by index.
    Union(Vec<Type>),
}

/// A field of a record: its name and type, and what a reader schema says of it for files
/// written without it or under another name: its `default` (JSON, checked to be a value of
/// its type when parsed) and `aliases`.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field's name.
    pub name: String,
    /// Its type.
    pub t: Type,
    /// Its other names.
    pub aliases: Vec<String>,
    /// Its default value.
    pub default: Option<Value>,
}

/// Parses a schema's JSON.
pub fn parse(json: &str) -> Result<Type, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| format!("the schema is not JSON: {e}"))?;
    Parser::default().parse(&value)
}

/// Named types seen so far (records, enums, fixed), which later places refer to by name,
/// and the namespace of the named type being parsed (which names inside it inherit).
#[derive(Default)]
struct Parser {
    named: HashMap<String, Type>,
    namespace: String,
    /// The records whose fields are being parsed.
    open: Vec<String>,
}

impl Parser {
    fn parse(&mut self, value: &Value) -> Result<Type, String> {
        match value {
            Value::String(name) => self.named_or_primitive(name),
            Value::Array(branches) => {
                Ok(Type::Union(branches.iter().map(|b| self.parse(b)).collect::<Result<_, _>>()?))
            }
            Value::Object(o) => {
                let kind = o.get("type").ok_or("a schema object without \"type\"")?;
                let Value::String(kind) = kind else { return self.parse(kind) };
                let name = o.get("name").and_then(Value::as_str);
                let namespace = o
                    .get("namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| self.namespace.clone());
                let full = |name: &str| match name.contains('.') || namespace.is_empty() {
                    true => name.to_string(),
                    false => format!("{namespace}.{name}"),
                };
                let parsed = match kind.as_str() {
                    "record" | "error" => {
                        let fields = o.get("fields").and_then(Value::as_array).ok_or("a record without \"fields\"")?;
                        // A record that refers to itself would need a recursive decoder: the
                        // reference is refused while its fields are parsed.
                        if let Some(n) = name {
                            self.open.push(full(n));
                        }
                        let enclosing = std::mem::replace(&mut self.namespace, namespace.clone());
                        let mut out = Vec::with_capacity(fields.len());
                        for f in fields {
                            let field = self.field(f);
                            out.push(field.inspect_err(|_| self.namespace = enclosing.clone())?);
                        }
                        self.namespace = enclosing;
                        if name.is_some() {
                            self.open.pop();
                        }
                        Type::Record(out)
                    }
                    "enum" => {
                        let symbols: Vec<String> = o
                            .get("symbols")
                            .and_then(Value::as_array)
                            .ok_or("an enum without symbols")?
                            .iter()
                            .map(|s| s.as_str().map(str::to_string).ok_or("an enum symbol is not a string"))
                            .collect::<Result<_, _>>()?;
                        let default = match o.get("default") {
                            None => None,
                            Some(Value::String(d)) if symbols.contains(d) => Some(d.clone()),
                            Some(d) => return Err(format!("the enum's default {d} is not one of its symbols")),
                        };
                        Type::Enum { symbols, default }
                    }
                    "fixed" => {
                        let size = o.get("size").and_then(Value::as_u64).ok_or("a fixed without a size")? as usize;
                        decimal(o, Some(size)).unwrap_or(Type::Fixed(size))
                    }
                    "array" => Type::Array(Box::new(self.parse(o.get("items").ok_or("an array without items")?)?)),
                    "map" => Type::Map(Box::new(self.parse(o.get("values").ok_or("a map without values")?)?)),
                    // A primitive written as an object, possibly with a logical type: dates,
                    // times and timestamps are their own types; others (decimal, uuid,
                    // local timestamps) are read as their underlying type.
                    other => match (other, o.get("logicalType").and_then(Value::as_str)) {
                        ("int", Some("date")) => Type::Date,
                        ("int", Some("time-millis")) => Type::TimeMillis,
                        ("long", Some("time-micros")) => Type::TimeMicros,
                        ("long", Some("timestamp-millis")) => Type::TimestampMillis,
                        ("long", Some("timestamp-micros")) => Type::TimestampMicros,
                        ("bytes", Some("decimal")) => decimal(o, None).unwrap_or(Type::Bytes),
                        _ => self.named_or_primitive(other)?,
                    },
                };
                if let (Some(n), "record" | "error" | "enum" | "fixed") = (name, kind.as_str()) {
                    self.named.insert(full(n), parsed.clone());
                }
                Ok(parsed)
            }
            other => Err(format!("{other} is not a schema")),
        }
    }

    /// A record field: its name, type, aliases and default (checked to be a value of the
    /// type).
    fn field(&mut self, f: &Value) -> Result<Field, String> {
        let name = f.get("name").and_then(Value::as_str).ok_or("a record field without a name")?;
        let t = self.parse(f.get("type").ok_or_else(|| format!("field {name:?} without a type"))?)?;
        let aliases = match f.get("aliases") {
            None => Vec::new(),
            Some(Value::Array(names)) => names
                .iter()
                .map(|a| a.as_str().map(str::to_string).ok_or(format!("field {name:?}: an alias is not a string")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("field {name:?}: aliases are not a list")),
        };
        let default = f.get("default").cloned();
        if let Some(v) = &default {
            encode_default(&t, v).map_err(|e| format!("field {name:?}: its default {v}: {e}"))?;
        }
        Ok(Field { name: name.to_string(), t, aliases, default })
    }

    fn named_or_primitive(&self, name: &str) -> Result<Type, String> {
        Ok(match name {
            "null" => Type::Null,
            "boolean" => Type::Boolean,
            "int" => Type::Int,
            "long" => Type::Long,
            "float" => Type::Float,
            "double" => Type::Double,
            "bytes" => Type::Bytes,
            "string" => Type::String,
            other if self.open.iter().any(|o| o == other || *o == format!("{}.{other}", self.namespace)) => {
                return Err(format!("recursive type {other:?} is not supported"))
            }
            other => self
                .named
                .get(other)
                .or_else(|| self.named.get(&format!("{}.{other}", self.namespace)))
                .cloned()
                .ok_or_else(|| format!("unknown type {other:?}"))?,
        })
    }
}

/// The decimal logical type of the schema object `o` over `bytes` (or `fixed` of `size`
/// bytes); `None` where its precision is missing or beyond 38 digits, or its scale beyond
/// it, which the specification says to read as the underlying type.
fn decimal(o: &serde_json::Map<String, Value>, size: Option<usize>) -> Option<Type> {
    if o.get("logicalType").and_then(Value::as_str) != Some("decimal") {
        return None;
    }
    let precision = o.get("precision").and_then(Value::as_u64).filter(|p| (1..=38).contains(p))? as u8;
    let scale = o.get("scale").map_or(Some(0), Value::as_u64).filter(|s| *s <= u64::from(precision))? as i8;
    Some(Type::Decimal { precision, scale, size })
}

impl Type {
    /// Whether values of this type are encoded as one varint (`int`, `long`, `enum`, and
    /// the logical types over `int` and `long`).
    pub fn is_varint(&self) -> bool {
        matches!(
            self,
            Type::Int
                | Type::Long
                | Type::Enum { .. }
                | Type::ResolvedEnum { .. }
                | Type::Date
                | Type::TimeMillis
                | Type::TimeMicros
                | Type::TimestampMillis
                | Type::TimestampMicros
        )
    }

    /// `T` of a `["null", T]` union (either order), with whether it was one.
    pub fn nullable(&self) -> (&Type, bool) {
        match self {
            Type::Union(b) if b.len() == 2 && b[0] == Type::Null => (&b[1], true),
            Type::Union(b) if b.len() == 2 && b[1] == Type::Null => (&b[0], true),
            other => (other, false),
        }
    }
}

/// The record type of the reader schema `json` (Avro's schema resolution: files are read
/// as this schema says, whatever schema they were written with), its fields' defaults
/// checked to be values of their types.
pub fn reader_schema(json: &str) -> Result<Type, String> {
    match parse(json)? {
        record @ Type::Record(_) => Ok(record),
        _ => Err("the reader schema is not a record".into()),
    }
}

/// The part of a record field's default `value` (of type `t`) that the flattened column
/// `path` below the field holds (empty: the field itself; `b.c` for the column `a.b.c` of
/// a field `a`; `keys` or `values` of a map), with its type, encoded as Avro writes it.
pub fn default_at(t: &Type, value: &Value, path: &str) -> Result<(Type, Vec<u8>), String> {
    if path.is_empty() {
        return Ok((t.clone(), encode_default(t, value)?));
    }
    let (head, rest) = path.split_once('.').unwrap_or((path, ""));
    match (t, value) {
        (Type::Record(fields), Value::Object(o)) => {
            let f = fields.iter().find(|f| f.name == head).ok_or_else(|| format!("no field {head:?}"))?;
            let v = o.get(head).or(f.default.as_ref()).ok_or_else(|| format!("no value for {head:?}"))?;
            default_at(&f.t, v, rest)
        }
        // A map's default entries as its two list columns, in key order.
        (Type::Map(values), Value::Object(o)) if rest.is_empty() => {
            let (item, items): (Type, Vec<Value>) = match head {
                "keys" => (Type::String, o.keys().map(|k| Value::String(k.clone())).collect()),
                "values" => ((**values).clone(), o.values().cloned().collect()),
                _ => return Err(format!("a map has keys and values, not {head:?}")),
            };
            let list = Type::Array(Box::new(item));
            let bytes = encode_default(&list, &Value::Array(items))?;
            Ok((list, bytes))
        }
        _ => Err(format!("no column {path:?} in a default of Avro {t:?}")),
    }
}

/// The binary encoding of the JSON default `value` of a field of type `t`, as the Avro
/// specification writes defaults: a union's is of its first branch, bytes and fixed are
/// strings of code points 0..=255, an enum's is its symbol.
fn encode_default(t: &Type, value: &Value) -> Result<Vec<u8>, String> {
    use super::binary::{put_bytes, put_long};
    let mut out = Vec::new();
    let wrong = || format!("not a value of Avro {t:?}");
    match (t, value) {
        (Type::Null, Value::Null) => {}
        (Type::Boolean, Value::Bool(b)) => out.push(u8::from(*b)),
        (
            Type::Int
            | Type::Long
            | Type::Date
            | Type::TimeMillis
            | Type::TimeMicros
            | Type::TimestampMillis
            | Type::TimestampMicros,
            Value::Number(n),
        ) => {
            let n = n.as_i64().ok_or_else(wrong)?;
            if matches!(t, Type::Int | Type::Date | Type::TimeMillis) && i32::try_from(n).is_err() {
                return Err(wrong());
            }
            put_long(&mut out, n);
        }
        (Type::Float, Value::Number(n)) => out.extend((n.as_f64().ok_or_else(wrong)? as f32).to_le_bytes()),
        (Type::Double, Value::Number(n)) => out.extend(n.as_f64().ok_or_else(wrong)?.to_le_bytes()),
        (Type::String, Value::String(s)) => put_bytes(&mut out, s.as_bytes()),
        (Type::Bytes | Type::Fixed(_) | Type::Decimal { .. }, Value::String(s)) => {
            let bytes =
                s.chars().map(|c| u8::try_from(u32::from(c)).map_err(|_| wrong())).collect::<Result<Vec<u8>, _>>()?;
            match t {
                Type::Fixed(n) | Type::Decimal { size: Some(n), .. } if bytes.len() != *n => return Err(wrong()),
                Type::Fixed(_) | Type::Decimal { size: Some(_), .. } => out.extend(bytes),
                _ => put_bytes(&mut out, &bytes),
            }
        }
        (Type::Enum { symbols, .. }, Value::String(s)) => {
            put_long(&mut out, symbols.iter().position(|x| x == s).ok_or_else(wrong)? as i64)
        }
        (Type::Array(item), Value::Array(items)) => {
            if !items.is_empty() {
                put_long(&mut out, items.len() as i64);
                for v in items {
                    out.extend(encode_default(item, v)?);
                }
            }
            put_long(&mut out, 0);
        }
        (Type::Record(fields), Value::Object(o)) => {
            for f in fields {
                let v = o.get(&f.name).or(f.default.as_ref()).ok_or_else(|| format!("no value for {:?}", f.name))?;
                out.extend(encode_default(&f.t, v)?);
            }
        }
        (Type::Map(values), Value::Object(o)) => {
            if !o.is_empty() {
                put_long(&mut out, o.len() as i64);
                for (k, v) in o {
                    put_bytes(&mut out, k.as_bytes());
                    out.extend(encode_default(values, v)?);
                }
            }
            put_long(&mut out, 0);
        }
        (Type::Union(branches), v) => {
            put_long(&mut out, 0);
            out.extend(encode_default(branches.first().ok_or_else(wrong)?, v)?);
        }
        _ => return Err(wrong()),
    }
    Ok(out)
}

/// The element spec of a file whose schema is `schema`: one field per record field.
pub fn element_spec(schema: &Type) -> Result<ElementSpec, String> {
    let Type::Record(fields) = schema else { return Err("the schema is not a record".into()) };
    let mut specs = Vec::with_capacity(fields.len());
    for f in fields {
        field_specs(&f.name, &f.t, &mut specs)?;
    }
    ElementSpec::new(specs).map_err(|e| e.to_string())
}

/// The fields the record field `name` of type `t` gives: one, or for a nested record its
/// fields' (named `name.field`, flattened), or for a map its keys and values as two lists
/// (`name.keys`, strings, and `name.values`).
fn field_specs(name: &str, t: &Type, out: &mut Vec<FieldSpec>) -> Result<(), String> {
    match t.nullable() {
        (Type::Record(fields), false) => {
            for f in fields {
                field_specs(&format!("{name}.{}", f.name), &f.t, out)?;
            }
            Ok(())
        }
        (Type::Map(value), false) => {
            out.push(FieldSpec::ragged(format!("{name}.keys"), DType::Utf8, vec![-1]));
            out.push(field_spec(&format!("{name}.values"), &Type::Array(value.clone()))?);
            Ok(())
        }
        (Type::Record(_) | Type::Map(_), true) => {
            Err(format!("field {name:?}: a nullable nested record or map is not supported yet"))
        }
        _ => {
            out.push(field_spec(name, t)?);
            Ok(())
        }
    }
}

fn field_spec(name: &str, t: &Type) -> Result<FieldSpec, String> {
    let (t, _) = t.nullable();
    let mut dims = 0;
    let mut item = t;
    while let Type::Array(inner) = item {
        dims += 1;
        item = inner.nullable().0;
    }
    let dtype = match item {
        Type::Boolean => DType::Bool,
        Type::Int => DType::Int32,
        Type::Long => DType::Int64,
        Type::Date => DType::Date32,
        Type::TimeMillis | Type::TimeMicros => DType::TimeMicros,
        Type::TimestampMillis | Type::TimestampMicros => DType::TimestampMicros,
        Type::Decimal { precision, scale, .. } => DType::Decimal128 { precision: *precision, scale: *scale },
        Type::Float => DType::Float32,
        Type::Double => DType::Float64,
        Type::String | Type::Enum { .. } | Type::ResolvedEnum { .. } => DType::Utf8,
        Type::Bytes | Type::Fixed(_) => DType::Binary,
        other => return Err(format!("field {name:?}: Avro type {} is not supported yet", describe(other))),
    };
    Ok(match dims {
        0 => FieldSpec::scalar(name, dtype),
        n => FieldSpec::ragged(name, dtype, vec![-1; n]),
    })
}

fn describe(t: &Type) -> &'static str {
    match t {
        Type::Map(_) => "map (in an array)",
        Type::Record(_) => "record (in an array)",
        Type::Union(_) => "union (other than [\"null\", T]; a features spec giving its dtype reads it)",
        Type::Null => "null",
        _ => "this",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_map_to_element_specs() {
        let schema = parse(
            r#"{"type":"record","name":"r","namespace":"x","fields":[
                {"name":"id","type":"long"},
                {"name":"label","type":["null","int"]},
                {"name":"f","type":{"type":"array","items":"float"}},
                {"name":"grid","type":{"type":"array","items":{"type":"array","items":"double"}}},
                {"name":"color","type":{"type":"enum","name":"c","symbols":["red","blue"]}},
                {"name":"again","type":"x.c"},
                {"name":"hash","type":{"type":"fixed","name":"h","size":4}},
                {"name":"s","type":"string"}]}"#,
        )
        .unwrap();
        let spec = element_spec(&schema).unwrap();
        assert_eq!(
            spec.to_string(),
            "{id: int64[], label: int32[], f: ragged float32[?], grid: ragged float64[?, ?], color: string[], again: string[], hash: bytes[], s: string[]}"
        );
    }

    #[test]
    fn nested_records_flatten_and_maps_become_keys_and_values() {
        let schema = parse(
            r#"{"type":"record","name":"r","fields":[
                {"name":"a","type":{"type":"record","name":"inner","fields":[
                    {"name":"b","type":"long"},
                    {"name":"deeper","type":{"type":"record","name":"d","fields":[{"name":"c","type":"string"}]}}]}},
                {"name":"m","type":{"type":"map","values":{"type":"array","items":"float"}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            element_spec(&schema).unwrap().to_string(),
            "{a.b: int64[], a.deeper.c: string[], m.keys: ragged string[?], m.values: ragged float32[?, ?]}"
        );
    }

    #[test]
    fn what_is_not_supported_is_named() {
        let maps = parse(
            r#"{"type":"record","name":"r","fields":[{"name":"m","type":{"type":"array","items":{"type":"map","values":"long"}}}]}"#,
        );
        assert!(element_spec(&maps.unwrap()).unwrap_err().contains("field \"m\": Avro type map (in an array)"));
        let nullable = parse(
            r#"{"type":"record","name":"r","fields":[{"name":"m","type":["null",{"type":"map","values":"long"}]}]}"#,
        );
        assert!(element_spec(&nullable.unwrap()).unwrap_err().contains("nullable nested record or map"));
        assert!(element_spec(&parse(r#""long""#).unwrap()).unwrap_err().contains("not a record"));
        assert!(parse(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"nope"}]}"#)
            .unwrap_err()
            .contains("unknown type"));
        assert!(parse("{").unwrap_err().contains("not JSON"));
        let list = r#"{"type":"record","name":"node","fields":[{"name":"next","type":["null","node"]}]}"#;
        assert!(parse(list).unwrap_err().contains("recursive type \"node\""));
    }

    #[test]
    fn reader_schema_defaults_are_encoded_as_their_types_say() {
        let record = reader_schema(
            r#"{"type":"record","name":"r","fields":[
                {"name":"a","type":["null","long"],"default":null},
                {"name":"b","type":{"type":"array","items":"int"},"default":[1,2],"aliases":["old_b"]},
                {"name":"c","type":"bytes","default":"\u00ff"},
                {"name":"d","type":{"type":"enum","name":"e","symbols":["x","y"]},"default":"y"},
                {"name":"f","type":"float","default":1.5},
                {"name":"m","type":{"type":"map","values":"int"},"default":{"k":3}},
                {"name":"g","type":"string"}]}"#,
        )
        .unwrap();
        let Type::Record(fields) = &record else { panic!("a record") };
        let defaults: Vec<Option<Vec<u8>>> =
            fields.iter().map(|f| f.default.as_ref().map(|d| encode_default(&f.t, d).unwrap())).collect();
        assert_eq!(
            defaults,
            vec![
                Some(vec![0]),
                Some(vec![4, 2, 4, 0]),
                Some(vec![2, 0xff]),
                Some(vec![2]),
                Some(1.5f32.to_le_bytes().to_vec()),
                // One block of one entry: "k" (length 1 as zigzag 2), 3 (zigzag 6), the end.
                Some(vec![2, 2, b'k', 6, 0]),
                None
            ]
        );
        assert_eq!(fields[1].aliases, vec!["old_b".to_string()]);
        // A map's default as its two columns.
        let (t, keys) = default_at(&fields[5].t, fields[5].default.as_ref().unwrap(), "keys").unwrap();
        assert_eq!((t, keys), (Type::Array(Box::new(Type::String)), vec![2, 2, b'k', 0]));
        let bad = reader_schema(r#"{"type":"record","name":"r","fields":[{"name":"n","type":"int","default":"x"}]}"#);
        assert!(bad.unwrap_err().contains("field \"n\""));
        assert!(reader_schema(r#""long""#).unwrap_err().contains("not a record"));
        let enum_default = r#"{"type":"record","name":"r","fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["A"],"default":"B"}}]}"#;
        assert!(reader_schema(enum_default).unwrap_err().contains("not one of its symbols"));
    }
}

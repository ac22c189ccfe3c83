//! The typed leaves of the e-graph language: names, literals and opaque descriptors.
//!
//! egg needs leaves that are `Ord + Hash + Display + FromStr`; flumen's IR values (floats,
//! specs, sources) are none of these, so each leaf carries a canonical text key that
//! identity, ordering and hashing are defined by. The text forms are what e-graph dumps
//! and the s-expression rule tests use:
//!
//! - literals: `2`, `2::int32`, `2.5`, `2.5::float32`, `true`, `"text"`, `null::int64`, `0x0aff`;
//! - names (field names, dtype and function names, keywords): bare words;
//! - opaque descriptors (closures, specs, sources, operators the rules never look inside):
//!   `#` followed by compact JSON.
//!
//! Characters the s-expression reader treats specially are rewritten so any leaf's text
//! reads back: `"` is written `'` (so JSON reads `{'source':'range',...}`), and space,
//! parentheses, `;`, `%`, `'`, tabs and newlines are written `%XX`.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use flumen_ir::{ClosureRef, DType, ElementSpec, Op, Scalar, SourceDesc};
use serde::{Deserialize, Serialize};

const SPECIAL: [char; 9] = [' ', '(', ')', ';', '%', '\'', '\t', '\n', '\r'];

/// `text` with the s-expression reader's special characters as `%XX`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if SPECIAL.contains(&c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else if c == '"' {
            out.push('\'');
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape`].
fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            let hex: String = chars.by_ref().take(2).collect();
            let code = u8::from_str_radix(&hex, 16).map_err(|_| format!("bad escape %{hex} in {text}"))?;
            out.push(char::from(code));
        } else if c == '\'' {
            out.push('"');
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// A constant: an expression literal, or an operator argument (sizes, counts, flags).
#[derive(Debug, Clone)]
pub struct Lit {
    value: Scalar,
    key: String,
}

impl Lit {
    /// The literal `value`.
    pub fn new(value: Scalar) -> Lit {
        let key = lit_text(&value);
        Lit { value, key }
    }

    /// An int64 literal (sizes and counts).
    pub fn int(v: i64) -> Lit {
        Lit::new(Scalar::Int(v, DType::Int64))
    }

    /// A boolean literal (flags).
    pub fn bool(v: bool) -> Lit {
        Lit::new(Scalar::Bool(v))
    }

    /// The value.
    pub fn value(&self) -> &Scalar {
        &self.value
    }
}

fn lit_text(v: &Scalar) -> String {
    match v {
        Scalar::Null(t) => format!("null::{t}"),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(v, DType::Int64) => v.to_string(),
        Scalar::Int(v, t) => format!("{v}::{t}"),
        Scalar::UInt64(v) => format!("{v}::u64"),
        Scalar::Float(v, DType::Float64) => format!("{v:?}"),
        Scalar::Float(v, t) => format!("{v:?}::{t}"),
        Scalar::Utf8(s) => serde_json::to_string(s).expect("strings serialize"),
        Scalar::Binary(b) => format!("0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
    }
}

impl FromStr for Lit {
    type Err = String;

    fn from_str(text: &str) -> Result<Lit, String> {
        let s = &unescape(text)?;
        let bad = || format!("not a literal: {s}");
        let value = if s == "true" || s == "false" {
            Scalar::Bool(s == "true")
        } else if s.starts_with('"') {
            Scalar::Utf8(serde_json::from_str(s).map_err(|_| bad())?)
        } else if let Some(hex) = s.strip_prefix("0x") {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(bad)?;
            Scalar::Binary(bytes)
        } else if let Some(t) = s.strip_prefix("null::") {
            Scalar::Null(DType::from_name(t).ok_or_else(bad)?)
        } else {
            let (num, t) = match s.split_once("::") {
                Some((n, t)) => (n, Some(t)),
                None => (s.as_str(), None),
            };
            if !num.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+')
                && !matches!(num, "NaN" | "inf" | "-inf")
            {
                return Err(bad());
            }
            match t {
                Some("u64") => Scalar::UInt64(num.parse().map_err(|_| bad())?),
                Some(t) => {
                    let t = DType::from_name(t).ok_or_else(bad)?;
                    if t.is_float() {
                        Scalar::Float(num.parse().map_err(|_| bad())?, t)
                    } else {
                        Scalar::Int(num.parse().map_err(|_| bad())?, t)
                    }
                }
                None if num.contains(['.', 'e', 'N', 'i']) => {
                    Scalar::Float(num.parse().map_err(|_| bad())?, DType::Float64)
                }
                None => Scalar::Int(num.parse().map_err(|_| bad())?, DType::Int64),
            }
        };
        Ok(Lit::new(value))
    }
}

/// A bare word: a field name, a dtype or function name, or a keyword (`keep`, `default`, ...).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(pub String);

impl FromStr for Name {
    type Err = String;

    fn from_str(s: &str) -> Result<Name, String> {
        Ok(Name(unescape(s)?))
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.0))
    }
}

/// An IR value that the rules read as a whole but never take apart in the e-graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpaqueValue {
    /// A data source.
    Source(SourceDesc),
    /// A registered closure.
    Closure(ClosureRef),
    /// The arguments of a `parse_example` map: the bytes field and the features.
    ParseExample(String, Vec<flumen_ir::example::FeatureSpec>),
    /// A closure's declared output spec.
    Spec(ElementSpec),
    /// An operator whose arguments no rule rewrites (inputs excluded).
    Op(Op),
}

/// An [`OpaqueValue`] with its canonical key.
#[derive(Debug, Clone)]
pub struct Opaque {
    value: Arc<OpaqueValue>,
    key: Arc<str>,
    text: Arc<str>,
}

impl Opaque {
    /// Wraps `value`. In-memory data is keyed by the identity of its batches rather than
    /// by its contents, so that large data is never serialized to build the e-graph.
    pub fn new(value: OpaqueValue) -> Opaque {
        let (key, text) = match &value {
            OpaqueValue::Source(SourceDesc::InMemory { spec, data }) => {
                let rows: usize = data.batches.iter().map(|b| b.num_rows()).sum();
                let text = format!("#in_memory[{rows} rows: {spec}]");
                (format!("{text}@{:p}", Arc::as_ptr(&data.batches)), text)
            }
            other => {
                let json = format!("#{}", serde_json::to_string(other).expect("IR values serialize"));
                (json.clone(), json)
            }
        };
        Opaque { value: Arc::new(value), key: key.into(), text: text.into() }
    }

    /// The value.
    pub fn value(&self) -> &OpaqueValue {
        &self.value
    }
}

impl PartialEq for Opaque {
    fn eq(&self, other: &Opaque) -> bool {
        self.key == other.key
    }
}

impl Eq for Opaque {}

impl PartialOrd for Opaque {
    fn partial_cmp(&self, other: &Opaque) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Opaque {
    fn cmp(&self, other: &Opaque) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl Hash for Opaque {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state)
    }
}

impl fmt::Display for Opaque {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.text))
    }
}

impl FromStr for Opaque {
    type Err = String;

    fn from_str(text: &str) -> Result<Opaque, String> {
        let s = &unescape(text)?;
        let json = s.strip_prefix('#').ok_or_else(|| format!("not an opaque value: {s}"))?;
        let value: OpaqueValue = serde_json::from_str(json).map_err(|e| format!("bad opaque value {s}: {e}"))?;
        Ok(Opaque::new(value))
    }
}

impl PartialEq for Lit {
    fn eq(&self, other: &Lit) -> bool {
        self.key == other.key
    }
}

impl Eq for Lit {}

impl PartialOrd for Lit {
    fn partial_cmp(&self, other: &Lit) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Lit {
    fn cmp(&self, other: &Lit) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl Hash for Lit {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state)
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip_through_text() {
        let values = [
            Scalar::Int(-3, DType::Int64),
            Scalar::Int(7, DType::Int32),
            Scalar::Int(7, DType::UInt64),
            Scalar::UInt64(u64::MAX),
            Scalar::Float(2.5, DType::Float64),
            Scalar::Float(-0.0, DType::Float32),
            Scalar::Float(1e-7, DType::Float64),
            Scalar::Float(f64::INFINITY, DType::Float64),
            Scalar::Bool(true),
            Scalar::Utf8("a \"quoted\" word".into()),
            Scalar::Binary(vec![0, 10, 255]),
            Scalar::Null(DType::Float32),
        ];
        for v in values {
            let lit = Lit::new(v.clone());
            let back: Lit = lit.to_string().parse().unwrap();
            assert_eq!(back.value(), &v, "{lit}");
        }
        assert!("x".parse::<Lit>().is_err());
        assert!("#{}".parse::<Lit>().is_err());
    }

    #[test]
    fn equal_floats_of_other_types_are_other_literals() {
        assert_ne!(Lit::new(Scalar::Float(1.0, DType::Float32)), Lit::new(Scalar::Float(1.0, DType::Float64)));
        assert_ne!(Lit::new(Scalar::Float(0.0, DType::Float64)), Lit::new(Scalar::Float(-0.0, DType::Float64)));
    }
}

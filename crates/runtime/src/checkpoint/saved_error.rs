//! Errors that sit in operator buffers (a zip lane's failed element, a window's failed slot)
//! must survive a checkpoint; [`SavedError`] is their serializable form, rebuilt as the same
//! variant with the same message, so a restored iterator reports them exactly as the
//! original would have.

use arrow::error::ArrowError;
use flumen_ir::{Error, Location};
use serde::{Deserialize, Serialize};

/// A serializable [`Error`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SavedError {
    /// [`Error::Plan`].
    Plan {
        /// The operator.
        operator: String,
        /// The message.
        message: String,
    },
    /// [`Error::Expr`].
    Expr {
        /// The message.
        message: String,
    },
    /// [`Error::Data`].
    Data {
        /// The file or source.
        source: String,
        /// The position in it.
        position: Option<String>,
        /// The message.
        message: String,
    },
    /// [`Error::Io`]: the I/O error's kind is not kept, its message is.
    Io {
        /// The file.
        path: String,
        /// The I/O error's message.
        message: String,
    },
    /// [`Error::Udf`].
    Udf {
        /// The operator.
        operator: String,
        /// The message.
        message: String,
    },
    /// [`Error::Execution`].
    Execution {
        /// The operator.
        operator: String,
        /// The message.
        message: String,
    },
    /// [`Error::Serde`].
    Serde {
        /// The message.
        message: String,
    },
    /// [`Error::Cancelled`].
    Cancelled,
    /// [`Error::Arrow`]: the variant's name and its text.
    Arrow {
        /// The `ArrowError` variant.
        variant: String,
        /// Its text.
        message: String,
    },
}

impl From<&Error> for SavedError {
    fn from(e: &Error) -> Self {
        match e {
            Error::Plan { operator, message } => {
                SavedError::Plan { operator: operator.clone(), message: message.clone() }
            }
            Error::Expr(message) => SavedError::Expr { message: message.clone() },
            Error::Data { location, message } => SavedError::Data {
                source: location.source.clone(),
                position: location.position.clone(),
                message: message.clone(),
            },
            Error::Io { path, source } => SavedError::Io { path: path.clone(), message: source.to_string() },
            Error::Udf { operator, message } => {
                SavedError::Udf { operator: operator.clone(), message: message.clone() }
            }
            Error::Execution { operator, message } => {
                SavedError::Execution { operator: operator.clone(), message: message.clone() }
            }
            Error::Serde(message) => SavedError::Serde { message: message.clone() },
            Error::Cancelled => SavedError::Cancelled,
            Error::Arrow(a) => {
                let (variant, message) = arrow_parts(a);
                SavedError::Arrow { variant: variant.to_string(), message }
            }
        }
    }
}

/// The variant name and payload text of an Arrow error, so that the rebuilt error prints
/// the same text.
fn arrow_parts(e: &ArrowError) -> (&'static str, String) {
    use ArrowError::*;
    match e {
        NotYetImplemented(s) => ("not_yet_implemented", s.clone()),
        CastError(s) => ("cast", s.clone()),
        MemoryError(s) => ("memory", s.clone()),
        ParseError(s) => ("parse", s.clone()),
        SchemaError(s) => ("schema", s.clone()),
        ComputeError(s) => ("compute", s.clone()),
        DivideByZero => ("divide_by_zero", String::new()),
        ArithmeticOverflow(s) => ("arithmetic_overflow", s.clone()),
        CsvError(s) => ("csv", s.clone()),
        JsonError(s) => ("json", s.clone()),
        IpcError(s) => ("ipc", s.clone()),
        InvalidArgumentError(s) => ("invalid_argument", s.clone()),
        ParquetError(s) => ("parquet", s.clone()),
        CDataInterface(s) => ("c_data_interface", s.clone()),
        // The rest carry no text of their own worth a variant: their whole display is kept.
        other => ("other", other.to_string()),
    }
}

impl SavedError {
    /// The error again.
    pub fn into_error(self) -> Error {
        match self {
            SavedError::Plan { operator, message } => Error::Plan { operator, message },
            SavedError::Expr { message } => Error::Expr(message),
            SavedError::Data { source, position, message } => {
                Error::Data { location: Location { source, position }, message }
            }
            SavedError::Io { path, message } => Error::Io { path, source: std::io::Error::other(message) },
            SavedError::Udf { operator, message } => Error::Udf { operator, message },
            SavedError::Execution { operator, message } => Error::Execution { operator, message },
            SavedError::Serde { message } => Error::Serde(message),
            SavedError::Cancelled => Error::Cancelled,
            SavedError::Arrow { variant, message } => Error::Arrow(match variant.as_str() {
                "not_yet_implemented" => ArrowError::NotYetImplemented(message),
                "cast" => ArrowError::CastError(message),
                "memory" => ArrowError::MemoryError(message),
                "parse" => ArrowError::ParseError(message),
                "schema" => ArrowError::SchemaError(message),
                "compute" => ArrowError::ComputeError(message),
                "divide_by_zero" => ArrowError::DivideByZero,
                "arithmetic_overflow" => ArrowError::ArithmeticOverflow(message),
                "csv" => ArrowError::CsvError(message),
                "json" => ArrowError::JsonError(message),
                "ipc" => ArrowError::IpcError(message),
                "invalid_argument" => ArrowError::InvalidArgumentError(message),
                "parquet" => ArrowError::ParquetError(message),
                "c_data_interface" => ArrowError::CDataInterface(message),
                _ => ArrowError::ExternalError(message.into()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_prints_the_same_after_a_round_trip() {
        let errors = vec![
            Error::plan("filter", "bad"),
            Error::Expr("x".into()),
            Error::data(Location::new("a.csv", "line 3"), "bad float"),
            Error::data(Location::source("range"), "overflow"),
            Error::io("a.csv", std::io::Error::new(std::io::ErrorKind::NotFound, "gone")),
            Error::Udf { operator: "map(closure 'f')".into(), message: "panicked".into() },
            Error::execution("zip", "lanes"),
            Error::Serde("eof".into()),
            Error::Arrow(ArrowError::DivideByZero),
            Error::Arrow(ArrowError::CastError("to int".into())),
            Error::Arrow(ArrowError::ArithmeticOverflow("i64".into())),
        ];
        for e in errors {
            let json = serde_json::to_string(&SavedError::from(&e)).unwrap();
            let back: SavedError = serde_json::from_str(&json).unwrap();
            assert_eq!(back.into_error().to_string(), e.to_string());
        }
    }
}

//! The one error type shared by every flumen crate.
//!
//! Errors are values: every failure names where it happened (the operator, the file and
//! offset or row) so that a user can find the bad input without a debugger.

use std::fmt;

/// Where in the input an error was found: a file (or source) and a position in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file path, or a source name such as `range` or `generator 'g'`.
    pub source: String,
    /// The position in that source, e.g. `row 17`, `byte 4096`, `row group 2`.
    pub position: Option<String>,
}

impl Location {
    /// A location in `source` at `position`.
    pub fn new(source: impl Into<String>, position: impl Into<String>) -> Self {
        Location { source: source.into(), position: Some(position.into()) }
    }

    /// A location naming only the source.
    pub fn source(source: impl Into<String>) -> Self {
        Location { source: source.into(), position: None }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.position {
            Some(p) => write!(f, "{} at {}", self.source, p),
            None => write!(f, "{}", self.source),
        }
    }
}

/// Every error flumen returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plan that cannot be built: ill-typed, unknown field, bad argument.
    #[error("invalid plan ({operator}): {message}")]
    Plan {
        /// The operator being built, e.g. `filter`.
        operator: String,
        /// What is wrong.
        message: String,
    },
    /// An expression that does not type-check or cannot be lowered.
    #[error("invalid expression: {0}")]
    Expr(String),
    /// Bad input data: corrupt file, unparsable value, wrong field count.
    #[error("bad input in {location}: {message}")]
    Data {
        /// Where the bad input is.
        location: Location,
        /// What is wrong with it.
        message: String,
    },
    /// An I/O failure on a file.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A user function failed or panicked while running.
    #[error("user function failed in {operator}: {message}")]
    Udf {
        /// The operator that called the function, e.g. `map(closure 'normalize')`.
        operator: String,
        /// The function's error or panic message.
        message: String,
    },
    /// A failure while running an operator that is not the input's fault.
    #[error("{operator} failed: {message}")]
    Execution {
        /// The physical operator.
        operator: String,
        /// What went wrong.
        message: String,
    },
    /// A plan that cannot be serialized or a document that cannot be read as a plan.
    #[error("serialization: {0}")]
    Serde(String),
    /// An error from an Arrow kernel that carries no more context.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The iterator was asked to stop (its cancel handle) before it ended. Not a failed
    /// element: `ignore_errors` passes it on.
    #[error("cancelled: the iterator was asked to stop")]
    Cancelled,
}

impl Error {
    /// An invalid-plan error for `operator`.
    pub fn plan(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Plan { operator: operator.into(), message: message.into() }
    }

    /// A bad-input error at `location`.
    pub fn data(location: Location, message: impl Into<String>) -> Self {
        Error::Data { location, message: message.into() }
    }

    /// An execution error in `operator`.
    pub fn execution(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Execution { operator: operator.into(), message: message.into() }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// This error as bad input of `operator` when it is an expression's: an expression that
    /// fails while the pipeline runs failed on the values it was given (a division by zero,
    /// an overflow, a value that a cast cannot hold), its types having been checked when the
    /// pipeline was built. Other errors are returned as they are.
    pub fn in_data_of(self, operator: &str) -> Self {
        match self {
            Error::Expr(message) => Error::Data { location: Location::source(operator), message },
            other => other,
        }
    }
}

/// `Result` with flumen's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

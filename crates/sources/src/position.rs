//! Reader positions as JSON, and the checks that a position fits the reader it is given to.
//!
//! Each reader has its own position type; [`encode`] tags it with the kind of reader, so that
//! [`decode`] can refuse a position of another kind of reader instead of misreading its
//! fields. Positions in a file record the file's length, so that a seek into a file that
//! changed since fails ([`check_len`]).

use std::fs::File;

use flumen_ir::{Error, Location, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reader::ReaderPosition;

/// The key of the kind of reader in a position.
const KIND: &str = "reader";

/// `position`, a reader's own position type, tagged with the reader's `kind`.
pub(crate) fn encode<P: Serialize>(kind: &str, position: &P) -> Result<ReaderPosition> {
    let value = serde_json::to_value(position).map_err(|e| Error::execution("position", e.to_string()))?;
    let Value::Object(mut fields) = value else {
        return Err(Error::execution("position", format!("the position of a {kind} reader is not an object")));
    };
    fields.insert(KIND.to_string(), Value::from(kind));
    Ok(Value::Object(fields))
}

/// The position of a `kind` reader in `position`; another kind of reader's position, or a
/// value of another shape, is an error.
pub(crate) fn decode<P: DeserializeOwned>(kind: &str, position: &ReaderPosition) -> Result<P> {
    let mismatch = |why: String| Error::execution("seek", format!("not a position of a {kind} reader: {why}"));
    let Value::Object(fields) = position else {
        return Err(mismatch(format!("{position} is not an object")));
    };
    match fields.get(KIND) {
        Some(Value::String(found)) if found == kind => {}
        Some(found) => return Err(mismatch(format!("it is a position of a {found} reader"))),
        None => return Err(mismatch(format!("{position} names no kind of reader"))),
    }
    let mut fields = fields.clone();
    fields.remove(KIND);
    serde_json::from_value(Value::Object(fields)).map_err(|e| mismatch(format!("{position}: {e}")))
}

/// The length of `file`, opened from `path`.
pub(crate) fn file_len(file: &File, path: &str) -> Result<u64> {
    Ok(file.metadata().map_err(|e| Error::io(path, e))?.len())
}

/// The error of a file that ends at byte `at` although it had `len` bytes when it was
/// opened: it was cut while being read, and what was being read at its end is incomplete.
pub(crate) fn cut_error(path: &str, at: u64, len: u64) -> Error {
    Error::data(
        Location::new(path, format!("byte {at}")),
        format!("the file ends here, but had {len} bytes when it was opened (cut while being read?)"),
    )
}

/// Fails unless the file `path`, `len` bytes long, is as long as when a position in it
/// was taken (`recorded`): a changed file would silently give other rows.
pub(crate) fn check_len(path: &str, recorded: u64, len: u64) -> Result<()> {
    if recorded == len {
        return Ok(());
    }
    Err(Error::data(
        Location::source(path),
        format!("cannot seek: the position was taken when the file had {recorded} bytes, it now has {len}"),
    ))
}

/// A data error that a reader holds to report before reading on, and that reading the same
/// input again would not find (an error about a whole chunk, whose boundaries may differ after
/// a seek): its position keeps it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeldError {
    /// The position in the file (`Location::position`).
    at: Option<String>,
    message: String,
}

impl HeldError {
    /// The data error `error`, kept; other kinds of errors are not held by readers.
    pub(crate) fn save(error: &Error) -> Result<Self> {
        match error {
            Error::Data { location, message } => {
                Ok(HeldError { at: location.position.clone(), message: message.clone() })
            }
            other => Err(Error::execution("position", format!("cannot keep the error '{other}' in a position"))),
        }
    }

    /// The error again, about the file `path`.
    pub(crate) fn restore(self, path: &str) -> Error {
        Error::data(Location { source: path.to_string(), position: self.at }, self.message)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Here {
        row: u64,
    }

    #[test]
    fn positions_are_tagged_with_their_kind_of_reader() {
        let position = encode("demo", &Here { row: 3 }).unwrap();
        assert_eq!(position, json!({"reader": "demo", "row": 3}));
        assert_eq!(decode::<Here>("demo", &position).unwrap(), Here { row: 3 });
        for (bad, why) in [
            (json!({"reader": "other", "row": 3}), "a position of a \"other\" reader"),
            (json!({"row": 3}), "names no kind of reader"),
            (json!([3]), "is not an object"),
            (json!({"reader": "demo", "row": -1}), "invalid value"),
            (json!({"reader": "demo", "row": 3, "extra": 1}), "unknown field"),
        ] {
            let err = decode::<Here>("demo", &bad).unwrap_err();
            assert!(matches!(err, Error::Execution { .. }) && err.to_string().contains(why), "{err}");
        }
    }

    #[test]
    fn held_errors_come_back_the_same() {
        let error = Error::data(Location::new("f.csv", "row group 2"), "bad");
        assert_eq!(HeldError::save(&error).unwrap().restore("f.csv").to_string(), error.to_string());
        assert!(HeldError::save(&Error::execution("x", "y")).is_err());
    }
}

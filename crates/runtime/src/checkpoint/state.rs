//! The state of one physical operator, with the states of its inputs as children.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::saved_error::SavedError;

/// What a checkpoint stores of buffered elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SaveMode {
    /// Every buffered element, so a restore reads nothing twice.
    Full,
    /// Positions, counters and seeds; large buffers are rebuilt by replaying the input.
    Symbolic,
}

/// The saved state of one operator: its kind (checked on restore), small named values,
/// buffered chunks and errors, and the states of its inputs in the operator's own order.
#[derive(Debug, Clone, PartialEq)]
pub struct OpState {
    /// The operator kind, e.g. `shuffle`; a restore into another kind is an error.
    pub kind: String,
    /// Positions, counters, random-stream positions: a JSON object.
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// Buffered elements, in the operator's own order.
    pub chunks: Vec<RecordBatch>,
    /// Buffered errors (elements that failed), in the operator's own order.
    pub errors: Vec<SavedError>,
    /// Input states; an absent input (not opened yet, or finished) is `None`.
    pub children: Vec<Option<OpState>>,
}

impl OpState {
    /// An empty state of an operator of `kind`.
    pub fn new(kind: &str) -> Self {
        OpState {
            kind: kind.to_string(),
            fields: serde_json::Map::new(),
            chunks: Vec::new(),
            errors: Vec::new(),
            children: Vec::new(),
        }
    }

    /// Adds the named value `key`.
    pub fn with<T: Serialize>(mut self, key: &str, value: T) -> Result<Self> {
        let value =
            serde_json::to_value(value).map_err(|e| Error::Serde(format!("saving {}.{key}: {e}", self.kind)))?;
        self.fields.insert(key.to_string(), value);
        Ok(self)
    }

    /// Adds an input's state.
    pub fn child(mut self, state: OpState) -> Self {
        self.children.push(Some(state));
        self
    }

    /// Adds an input's state, or its absence.
    pub fn maybe_child(mut self, state: Option<OpState>) -> Self {
        self.children.push(state);
        self
    }

    /// Adds buffered chunks.
    pub fn with_chunks(mut self, chunks: impl IntoIterator<Item = RecordBatch>) -> Self {
        self.chunks.extend(chunks);
        self
    }

    /// Adds a buffered error.
    pub fn with_error(mut self, error: &Error) -> Self {
        self.errors.push(SavedError::from(error));
        self
    }

    /// This state, after checking that it was saved by an operator of `kind`.
    pub fn expect(self, kind: &str) -> Result<Self> {
        if self.kind == kind {
            Ok(self)
        } else {
            Err(mismatch(format!("a '{}' operator's state cannot be restored into a '{kind}' operator", self.kind)))
        }
    }

    /// The named value `key`.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<T> {
        let value =
            self.fields.get(key).ok_or_else(|| mismatch(format!("the '{}' state has no '{key}'", self.kind)))?;
        serde_json::from_value(value.clone())
            .map_err(|e| mismatch(format!("the '{}' state's '{key}' is malformed: {e}", self.kind)))
    }

    /// Takes the next input state in order (`None` for an absent input).
    pub fn next_child(&mut self) -> Result<Option<OpState>> {
        if self.children.is_empty() {
            return Err(mismatch(format!("the '{}' state has fewer inputs than its operator", self.kind)));
        }
        Ok(self.children.remove(0))
    }

    /// Takes the next input state in order, which must be present.
    pub fn take_child(&mut self) -> Result<OpState> {
        self.next_child()?.ok_or_else(|| mismatch(format!("the '{}' state lacks an input's state", self.kind)))
    }

    /// Takes the buffered errors, rebuilt as errors.
    pub fn take_errors(&mut self) -> Vec<Error> {
        std::mem::take(&mut self.errors).into_iter().map(SavedError::into_error).collect()
    }

    /// Adds results computed ahead (chunks and errors, in order): the chunks and errors go
    /// to this state's lists, their order to the field `key`.
    pub fn with_results<'a>(
        mut self,
        key: &str,
        results: impl IntoIterator<Item = &'a Result<RecordBatch>>,
    ) -> Result<Self> {
        let mut order = Vec::new();
        for r in results {
            order.push(r.is_ok());
            match r {
                Ok(chunk) => self.chunks.push(chunk.clone()),
                Err(e) => self.errors.push(SavedError::from(e)),
            }
        }
        self.with(key, order)
    }

    /// Takes the results saved by [`OpState::with_results`] under `key`.
    pub fn take_results<C: FromIterator<Result<RecordBatch>>>(&mut self, key: &str) -> Result<C> {
        let order: Vec<bool> = self.get(key)?;
        let mut chunks = std::mem::take(&mut self.chunks).into_iter();
        let mut errors = self.take_errors().into_iter();
        order
            .into_iter()
            .map(|ok| match ok {
                true => chunks.next().map(Ok).ok_or_else(|| mismatch("a saved result chunk is missing")),
                false => errors.next().map(Err).ok_or_else(|| mismatch("a saved result error is missing")),
            })
            .collect::<Result<Vec<_>>>()
            .map(|v| v.into_iter().collect())
    }

    /// Takes the first buffered error, if any.
    pub fn take_error(&mut self) -> Option<Error> {
        (!self.errors.is_empty()).then(|| self.errors.remove(0).into_error())
    }
}

/// The error of a checkpoint that does not fit the operator tree it is restored into.
pub fn mismatch(message: impl Into<String>) -> Error {
    Error::execution("restore", message)
}

//! `window(size, shift, stride, drop_remainder)`, each window emitted batched (tf.data's
//! `window(...).flat_map(lambda w: w.batch(size))`).
//!
//! Window `i` holds input elements `i*shift + j*stride` for `j` in `0..size`, truncated at
//! the end of the input; windows starting past the end are not emitted, and with
//! `drop_remainder` truncated windows are dropped. Only the input rows the next windows
//! need are buffered. `shift == size` with `stride == 1` is exactly `batch` (zero-copy).
//!
//! An input error takes a slot, as in tf.data (`buffer_.emplace_back(element, status)`): each
//! window that contains it is returned as that error instead of a window.

use std::collections::VecDeque;

use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use super::batch::BatchOp;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::make_batch;
use crate::kernels::list_kernels::{gather, push_run, wrap, Run};
use crate::operator::{BoxOperator, Operator};

/// The most input elements gathered into one output chunk (at least one window is).
const MAX_GATHER: usize = 1 << 20;

/// `window(size, shift, stride, drop_remainder)`.
pub struct WindowOp {
    inner: Inner,
}

enum Inner {
    Batch(Box<BatchOp>),
    Sliding(Box<Sliding>),
}

struct Sliding {
    input: BoxOperator,
    schema: SchemaRef,
    size: u64,
    shift: u64,
    stride: u64,
    drop_remainder: bool,
    /// Buffered input chunks, in order, and the absolute index of each one's first row.
    chunks: VecDeque<RecordBatch>,
    starts: VecDeque<u64>,
    /// Buffered input errors, in order, each with the absolute index of its slot.
    errors: VecDeque<(u64, Error)>,
    /// The absolute index one past the last buffered row or error.
    end: u64,
    /// The absolute index of the next window's first element.
    next_start: u64,
    /// The input has ended.
    input_done: bool,
    /// No more windows.
    finished: bool,
}

impl WindowOp {
    /// Windows of `input` (all of `size`, `shift`, `stride` > 0); `schema` is the output schema.
    pub fn new(
        input: BoxOperator,
        size: u64,
        shift: u64,
        stride: u64,
        drop_remainder: bool,
        schema: SchemaRef,
    ) -> Self {
        let (size, shift, stride) = (size.max(1), shift.max(1), stride.max(1));
        let inner = if shift == size && stride == 1 {
            Inner::Batch(Box::new(BatchOp::windows(input, size, drop_remainder, schema)))
        } else {
            Inner::Sliding(Box::new(Sliding {
                input,
                schema,
                size,
                shift,
                stride,
                drop_remainder,
                chunks: VecDeque::new(),
                starts: VecDeque::new(),
                errors: VecDeque::new(),
                end: 0,
                next_start: 0,
                input_done: false,
                finished: false,
            }))
        };
        WindowOp { inner }
    }
}

impl Operator for WindowOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match &mut self.inner {
            Inner::Batch(b) => b.next_chunk(),
            Inner::Sliding(s) => s.next_chunk(),
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match &self.inner {
            Inner::Batch(b) => b.save(mode),
            Inner::Sliding(s) => s.save(mode),
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        match &mut self.inner {
            Inner::Batch(b) => b.restore(state),
            Inner::Sliding(s) => s.restore(state),
        }
    }
}

impl Sliding {
    /// The buffered rows and errors of the windows not yet emitted (they overlap by
    /// `size - shift`, so this is bounded by the window span plus one input chunk).
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let error_slots: Vec<u64> = self.errors.iter().map(|(i, _)| *i).collect();
        let mut state = OpState::new("window")
            .with("starts", &self.starts)?
            .with("error_slots", &error_slots)?
            .with("end", self.end)?
            .with("next_start", self.next_start)?
            .with("input_done", self.input_done)?
            .with("finished", self.finished)?
            .with_chunks(self.chunks.iter().cloned());
        for (_, e) in &self.errors {
            state = state.with_error(e);
        }
        Ok(state.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("window")?;
        self.input.restore(state.take_child()?)?;
        self.starts = state.get("starts")?;
        let error_slots: Vec<u64> = state.get("error_slots")?;
        let error_count = error_slots.len();
        self.errors = error_slots.into_iter().zip(state.take_errors()).collect();
        self.end = state.get("end")?;
        self.next_start = state.get("next_start")?;
        self.input_done = state.get("input_done")?;
        self.finished = state.get("finished")?;
        self.chunks = std::mem::take(&mut state.chunks).into();
        let increasing = self.starts.iter().zip(self.starts.iter().skip(1)).all(|(a, b)| a <= b);
        if self.starts.len() != self.chunks.len() || self.errors.len() != error_count || !increasing {
            return Err(crate::checkpoint::state::mismatch("window: the saved buffer is inconsistent"));
        }
        Ok(())
    }
}

impl Sliding {
    /// The length of the window starting at `start` if it can be emitted now; `None` when it
    /// needs more input or there is no such window.
    fn ready_len(&self, start: u64) -> Option<u64> {
        let last = start.saturating_add((self.size - 1).saturating_mul(self.stride));
        if last < self.end {
            return Some(self.size);
        }
        if self.input_done && start < self.end {
            let len = (self.end - 1 - start) / self.stride + 1;
            return Some(len);
        }
        None
    }

    /// The first error among the `len` elements of the window starting at `start`.
    fn error_in(&self, start: u64, len: u64) -> Option<usize> {
        let last = start + (len - 1) * self.stride;
        self.errors.iter().position(|&(at, _)| at >= start && at <= last && (at - start).is_multiple_of(self.stride))
    }

    /// Drops buffered chunks and errors that come before the next window starts.
    fn release(&mut self) {
        while self.errors.front().is_some_and(|&(at, _)| at < self.next_start) {
            self.errors.pop_front();
        }
        while let (Some(c), Some(&s)) = (self.chunks.front(), self.starts.front()) {
            if s + c.num_rows() as u64 <= self.next_start {
                self.chunks.pop_front();
                self.starts.pop_front();
            } else {
                break;
            }
        }
    }

    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.finished {
                return Ok(None);
            }
            let mut runs: Vec<Run> = Vec::new();
            let mut indices: Vec<(usize, usize)> = Vec::new();
            let mut windows = 0usize;
            while indices.len() < MAX_GATHER {
                let start = self.next_start;
                let Some(len) = self.ready_len(start) else {
                    break;
                };
                if len < self.size && self.drop_remainder {
                    // Every later window is shorter still.
                    self.finished = true;
                    break;
                }
                if let Some(e) = self.error_in(start, len) {
                    if windows > 0 {
                        // The windows before it are returned first.
                        break;
                    }
                    self.next_start = start.saturating_add(self.shift);
                    // Later windows may contain the error too: they get copies.
                    let taken = (self.errors[e].0 < self.next_start).then(|| self.errors.remove(e)).flatten();
                    let error = match taken {
                        Some((_, error)) => error,
                        None => replicate(&self.errors[e].1),
                    };
                    self.release();
                    return Err(error);
                }
                for j in 0..len {
                    let at = start + j * self.stride;
                    let ci = self.starts.partition_point(|&s| s <= at) - 1;
                    indices.push((ci, (at - self.starts[ci]) as usize));
                }
                push_run(&mut runs, len as usize);
                windows += 1;
                self.next_start = start.saturating_add(self.shift);
            }
            if windows > 0 {
                let columns = (0..self.schema.fields().len())
                    .map(|c| {
                        let arrays: Vec<&dyn Array> = self.chunks.iter().map(|ch| ch.column(c).as_ref()).collect();
                        let child = gather(&arrays, &indices)?;
                        wrap(self.schema.field(c).data_type(), child, &runs)
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.release();
                return make_batch(&self.schema, columns, windows).map(Some);
            }
            if self.finished {
                return Ok(None);
            }
            if self.input_done {
                self.finished = true;
                return Ok(None);
            }
            match self.input.next_chunk() {
                Err(e) => {
                    self.errors.push_back((self.end, e));
                    self.end += 1;
                }
                Ok(None) => self.input_done = true,
                Ok(Some(c)) => {
                    let n = c.num_rows() as u64;
                    if n > 0 {
                        self.starts.push_back(self.end);
                        self.chunks.push_back(c);
                        self.end += n;
                        self.release();
                    }
                }
            }
        }
    }
}

/// A copy of `e` (an error of an element that several windows contain).
fn replicate(e: &Error) -> Error {
    match e {
        Error::Plan { operator, message } => Error::plan(operator.clone(), message.clone()),
        Error::Expr(m) => Error::Expr(m.clone()),
        Error::Data { location, message } => Error::data(location.clone(), message.clone()),
        Error::Io { path, source } => Error::io(path.clone(), std::io::Error::new(source.kind(), source.to_string())),
        Error::Udf { operator, message } => Error::Udf { operator: operator.clone(), message: message.clone() },
        Error::Execution { operator, message } => Error::execution(operator.clone(), message.clone()),
        Error::Serde(m) => Error::Serde(m.clone()),
        Error::Cancelled => Error::Cancelled,
        Error::Arrow(a) => Error::Arrow(match a {
            ArrowError::DivideByZero => ArrowError::DivideByZero,
            ArrowError::ComputeError(m) => ArrowError::ComputeError(m.clone()),
            ArrowError::CastError(m) => ArrowError::CastError(m.clone()),
            ArrowError::ArithmeticOverflow(m) => ArrowError::ArithmeticOverflow(m.clone()),
            ArrowError::InvalidArgumentError(m) => ArrowError::InvalidArgumentError(m.clone()),
            other => ArrowError::ExternalError(other.to_string().into()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Int64Type};
    use flumen_ir::Op;

    use super::*;
    use crate::kernels::list_kernels::testing::{collect, int_chunks, int_spec, rows, source, strs, VecOp};

    fn window(n: i64, splits: &[usize], size: u64, shift: u64, stride: u64, drop: bool) -> Vec<String> {
        let values: Vec<i64> = (0..n).collect();
        let op = Op::Window { size, shift, stride, drop_remainder: drop };
        let schema = op.output_spec(&[&int_spec("x")]).unwrap().arrow_schema();
        let mut w = WindowOp::new(source(int_chunks("x", &values, splits)), size, shift, stride, drop, schema.clone());
        rows(&collect(&mut w, &schema).unwrap(), "x")
    }

    #[test]
    fn tf_doc_shift_2() {
        let expected = strs(&["[0, 1, 2]", "[2, 3, 4]", "[4, 5, 6]", "[6]"]);
        assert_eq!(window(7, &[7], 3, 2, 1, false), expected);
        assert_eq!(window(7, &[3, 1, 2, 1], 3, 2, 1, false), expected);
        assert_eq!(window(7, &[2, 5], 3, 2, 1, true), strs(&["[0, 1, 2]", "[2, 3, 4]", "[4, 5, 6]"]));
    }

    #[test]
    fn tf_doc_stride_2() {
        let expected = strs(&["[0, 2, 4]", "[1, 3, 5]", "[2, 4, 6]", "[3, 5]", "[4, 6]", "[5]", "[6]"]);
        assert_eq!(window(7, &[7], 3, 1, 2, false), expected);
        assert_eq!(window(7, &[1, 1, 3, 2], 3, 1, 2, false), expected);
        assert_eq!(window(7, &[4, 3], 3, 1, 2, true), strs(&["[0, 2, 4]", "[1, 3, 5]", "[2, 4, 6]"]));
    }

    #[test]
    fn tf_doc_shift_equals_size_is_batch() {
        // range(7).window(2) -> [0, 1], [2, 3], [4, 5], [6]
        assert_eq!(window(7, &[3, 4], 2, 2, 1, false), strs(&["[0, 1]", "[2, 3]", "[4, 5]", "[6]"]));
        assert_eq!(window(7, &[3, 4], 2, 2, 1, true), strs(&["[0, 1]", "[2, 3]", "[4, 5]"]));
    }

    #[test]
    fn shift_larger_than_window_skips_elements() {
        // Windows start at 0, 4, 8: [0, 1], [4, 5], [8, 9].
        assert_eq!(window(10, &[3, 3, 3, 1], 2, 4, 1, false), strs(&["[0, 1]", "[4, 5]", "[8, 9]"]));
        // range(7).window(3, shift=3, stride=2): [0, 2, 4], [3, 5], [6]
        assert_eq!(window(7, &[5, 2], 3, 3, 2, false), strs(&["[0, 2, 4]", "[3, 5]", "[6]"]));
        assert!(window(0, &[], 3, 1, 1, false).is_empty());
    }

    #[test]
    fn buffers_only_what_next_windows_need() {
        let values: Vec<i64> = (0..100).collect();
        let schema = int_spec("x").batched(-1).arrow_schema();
        let mut w = WindowOp::new(source(int_chunks("x", &values, &[10; 10])), 2, 1, 1, false, schema.clone());
        let out = collect(&mut w, &schema).unwrap();
        assert_eq!(out.iter().map(|c| c.num_rows()).sum::<usize>(), 100);
        let Inner::Sliding(s) = &w.inner else { unreachable!() };
        assert!(s.chunks.len() <= 1);
        let last = out.last().unwrap().column(0).as_list::<i32>().value(out.last().unwrap().num_rows() - 1);
        assert_eq!(last.as_primitive::<Int64Type>().values().to_vec(), vec![99]);
        assert!(matches!(schema.field(0).data_type(), DataType::List(_)));
    }

    /// The windows of range(6) whose element 2 is an input error (between the chunks of
    /// `before` and `after` rows of the other elements), `Err` for each error.
    fn window_with_error(before: &[usize], after: &[usize], size: u64, shift: u64, stride: u64) -> Vec<String> {
        let splits: Vec<usize> = before.iter().chain(after).copied().collect();
        let mut q: VecDeque<Result<RecordBatch>> =
            int_chunks("x", &[0, 1, 3, 4, 5], &splits).into_iter().map(Ok).collect();
        q.insert(before.len(), Err(Error::execution("test", "element 2")));
        let schema = Op::Window { size, shift, stride, drop_remainder: false }
            .output_spec(&[&int_spec("x")])
            .unwrap()
            .arrow_schema();
        let mut w = WindowOp::new(Box::new(VecOp(q)), size, shift, stride, false, schema.clone());
        let mut out = Vec::new();
        loop {
            match w.next_chunk() {
                Ok(Some(c)) => {
                    assert_eq!(c.schema(), schema);
                    out.extend(rows(&[c], "x"));
                }
                Ok(None) => return out,
                Err(e) => {
                    assert!(e.to_string().contains("element 2"), "{e}");
                    out.push("Err".into());
                }
            }
        }
    }

    #[test]
    fn an_input_error_is_the_error_of_every_window_containing_it() {
        // tf: window(2, shift=1): [0, 1], error ([1, 2]), error ([2, 3]), [3, 4], [4, 5], [5].
        let expected = strs(&["[0, 1]", "Err", "Err", "[3, 4]", "[4, 5]", "[5]"]);
        assert_eq!(window_with_error(&[2], &[3], 2, 1, 1), expected);
        assert_eq!(window_with_error(&[1, 1], &[1, 2], 2, 1, 1), expected);
        // window(3, shift=3): error ([0, 1, 2]), [3, 4, 5].
        assert_eq!(window_with_error(&[2], &[3], 3, 3, 1), strs(&["Err", "[3, 4, 5]"]));
        assert_eq!(window_with_error(&[1, 1], &[2, 1], 3, 3, 1), strs(&["Err", "[3, 4, 5]"]));
        // window(2, shift=1, stride=2): [1, 3] and [3, 5] skip element 2.
        let expected = strs(&["Err", "[1, 3]", "Err", "[3, 5]", "[4]", "[5]"]);
        assert_eq!(window_with_error(&[2], &[3], 2, 1, 2), expected);
        assert_eq!(window_with_error(&[1, 1], &[1, 1, 1], 2, 1, 2), expected);
        // window(2, shift=3): windows [0, 1] and [3, 4] do not contain it.
        assert_eq!(window_with_error(&[2], &[3], 2, 3, 1), strs(&["[0, 1]", "[3, 4]"]));
    }
}

//! `zip`: the inputs' elements side by side, kept in step around errors.

use std::collections::VecDeque;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// What follows a zip lane's buffered rows in its input.
enum Tail {
    /// The input failed on the element right after the buffered rows.
    Err(Error),
    /// The input ended right after the buffered rows.
    End,
}

/// One zip input: its reader and the rows read from it but not yet emitted.
struct Lane {
    reader: RowReader,
    /// Rows read ahead, in order (slices of the input's chunks).
    rows: VecDeque<RecordBatch>,
    /// The number of rows in `rows`.
    len: usize,
    /// The input's error or end right after `rows`; nothing is read past it.
    tail: Option<Tail>,
}

impl Lane {
    /// Reads up to `max` more rows (one slice); an error or the end becomes the tail.
    fn read(&mut self, max: usize) {
        match self.reader.next_slice(max) {
            Ok(Some(s)) => {
                self.len += s.num_rows();
                self.rows.push_back(s);
            }
            Ok(None) => self.tail = Some(Tail::End),
            Err(e) => self.tail = Some(Tail::Err(e)),
        }
    }

    /// Reads until `n` rows are buffered or the tail is reached.
    fn fill(&mut self, n: usize) {
        while self.len < n && self.tail.is_none() {
            self.read(n - self.len);
        }
    }

    /// Removes and returns the first `n` buffered rows (`n <= len`, `n > 0`).
    fn take(&mut self, n: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        let mut need = n;
        while need > 0 {
            let first = &self.rows[0];
            let k = first.num_rows();
            if k <= need {
                out.extend(self.rows.pop_front());
                need -= k;
            } else {
                out.push(first.slice(0, need));
                self.rows[0] = first.slice(need, k - need);
                need = 0;
            }
        }
        self.len -= n;
        out
    }
}

/// `zip`: the inputs' elements side by side; ends with the shortest input.
///
/// Element `i` is an error when any input's element `i` is (the first such error is
/// reported), and every input still advances by one element, as tf.data does, so the inputs
/// stay in step. Rows read ahead of an error are kept, never dropped.
pub struct ZipOp {
    lanes: Vec<Lane>,
    schema: SchemaRef,
    done: bool,
    /// The most rows of the first input one output chunk takes (the other inputs are read
    /// as far as it).
    step: usize,
}

impl ZipOp {
    /// Zips `inputs`; `schema` is the output schema (all inputs' fields in order).
    pub fn new(inputs: Vec<BoxOperator>, schema: SchemaRef) -> Self {
        let lanes = inputs
            .into_iter()
            .map(|i| Lane { reader: RowReader::new(i), rows: VecDeque::new(), len: 0, tail: None })
            .collect();
        ZipOp { lanes, schema, done: false, step: usize::MAX }
    }

    /// The same zip taking at most `rows` rows of its first input into one output chunk.
    pub fn reading_at_most(mut self, rows: usize) -> Self {
        self.step = rows.max(1);
        self
    }

    /// The element at the front of every lane when some lane's tail is there: an error or the
    /// end, element by element as tf.data's zip pulls its components (in order; an end stops
    /// the pull, an error still advances the remaining components).
    fn front_event(&mut self) -> Result<Option<RecordBatch>> {
        let mut error = None;
        let mut ended = false;
        for lane in &mut self.lanes {
            if lane.len == 0 && lane.tail.is_none() {
                lane.read(1);
            }
            if lane.len > 0 {
                lane.take(1);
                continue;
            }
            match lane.tail.take() {
                Some(Tail::Err(e)) => {
                    error.get_or_insert(e);
                }
                // The lane has ended (a read that returns no row sets the tail).
                _ => {
                    lane.tail = Some(Tail::End);
                    ended = true;
                    break;
                }
            }
        }
        match error {
            Some(e) => {
                self.done = ended;
                Err(e)
            }
            // Called with a tail at the front, so without an error some lane has ended.
            None => {
                self.done = true;
                Ok(None)
            }
        }
    }
}

impl Operator for ZipOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if self.done || self.lanes.is_empty() {
            return Ok(None);
        }
        // The first input sets the chunk size, so its chunks pass through uncopied.
        let first = &mut self.lanes[0];
        if first.len == 0 && first.tail.is_none() {
            first.read(self.step);
        }
        let n = first.len;
        for lane in &mut self.lanes[1..] {
            lane.fill(n);
        }
        // Rows every input has before the first error or end.
        let m = self.lanes.iter().map(|l| if l.tail.is_some() { l.len.min(n) } else { n }).min().unwrap_or(0);
        if m == 0 {
            return self.front_event();
        }
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for lane in &mut self.lanes {
            let part = concat(&lane.take(m))?.expect("m > 0 rows");
            columns.extend(part.columns().iter().cloned());
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }

    /// Per lane: the rows read ahead (bounded by one chunk of the first lane), the error or
    /// end right after them, and the input's state.
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("zip").with("done", self.done)?;
        for lane in &self.lanes {
            let tail = match &lane.tail {
                None => "none",
                Some(Tail::End) => "end",
                Some(Tail::Err(_)) => "error",
            };
            let mut lane_state = OpState::new("zip_lane").with("tail", tail)?.with_chunks(lane.rows.iter().cloned());
            if let Some(Tail::Err(e)) = &lane.tail {
                lane_state = lane_state.with_error(e);
            }
            state = state.child(lane_state.child(lane.reader.save(mode)?));
        }
        Ok(state)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("zip")?;
        self.done = state.get("done")?;
        for lane in &mut self.lanes {
            let mut lane_state = state.take_child()?.expect("zip_lane")?;
            lane.reader.restore(lane_state.take_child()?)?;
            lane.tail = match lane_state.get::<String>("tail")?.as_str() {
                "end" => Some(Tail::End),
                "error" => lane_state.take_error().map(Tail::Err),
                _ => None,
            };
            lane.rows = std::mem::take(&mut lane_state.chunks).into();
            lane.len = lane.rows.iter().map(|r| r.num_rows()).sum();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use flumen_ir::{DType, ElementSpec, FieldSpec};

    use super::*;
    use crate::kernels::list_kernels::testing::{drain, int_chunks, VecOp};
    use crate::ops::ignore_errors::IgnoreErrorsOp;

    /// An input yielding `values` in chunks of `splits` rows, with an error in place of each
    /// element in `errors` (the error stands for that element; the values after it follow).
    fn failing(name: &str, values: &[i64], errors: &[i64], splits: &[usize]) -> BoxOperator {
        let mut out = VecDeque::new();
        let mut at = 0;
        for &n in splits {
            let part = &values[at..at + n];
            at += n;
            let mut run = Vec::new();
            for &v in part {
                if errors.contains(&v) {
                    if !run.is_empty() {
                        out.push_back(Ok(int_chunks(name, &run, &[run.len()]).remove(0)));
                        run.clear();
                    }
                    out.push_back(Err(Error::execution("test", format!("bad element {v}"))));
                } else {
                    run.push(v);
                }
            }
            if !run.is_empty() {
                out.push_back(Ok(int_chunks(name, &run, &[run.len()]).remove(0)));
            }
        }
        assert_eq!(at, values.len(), "splits must cover the values");
        Box::new(VecOp(out))
    }

    fn range(name: &str, n: i64, splits: &[usize]) -> BoxOperator {
        failing(name, &(0..n).collect::<Vec<_>>(), &[], splits)
    }

    fn schema(names: &[&str]) -> SchemaRef {
        let fields = names.iter().map(|n| FieldSpec::scalar(*n, DType::Int64)).collect();
        ElementSpec::new(fields).unwrap().arrow_schema()
    }

    fn pairs(range: std::ops::Range<i64>) -> Vec<String> {
        range.map(|i| format!("{i},{i}")).collect()
    }

    /// (0,0)..(4,4), Err, (6,6)..(9,9)
    fn expected_skip_5() -> Vec<String> {
        let mut e = pairs(0..5);
        e.push("Err".into());
        e.extend(pairs(6..10));
        e
    }

    const SPLITS: [&[usize]; 4] = [&[10], &[3, 4, 3], &[5, 5], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]];

    #[test]
    fn zip_error_in_second_input_keeps_rows_and_stays_in_step() {
        let values: Vec<i64> = (0..10).collect();
        let schema = schema(&["a", "b"]);
        for a_splits in SPLITS {
            for b_splits in SPLITS {
                let inputs = vec![range("a", 10, a_splits), failing("b", &values, &[5], b_splits)];
                let mut zip = ZipOp::new(inputs, schema.clone());
                assert_eq!(drain(&mut zip, &schema), expected_skip_5(), "{a_splits:?} {b_splits:?}");
            }
        }
    }

    #[test]
    fn zip_error_in_first_input_keeps_rows_and_stays_in_step() {
        let values: Vec<i64> = (0..10).collect();
        let schema = schema(&["b", "a"]);
        for a_splits in SPLITS {
            for b_splits in SPLITS {
                let inputs = vec![failing("b", &values, &[5], b_splits), range("a", 10, a_splits)];
                let mut zip = ZipOp::new(inputs, schema.clone());
                assert_eq!(drain(&mut zip, &schema), expected_skip_5(), "{a_splits:?} {b_splits:?}");
            }
        }
    }

    #[test]
    fn zip_errors_at_several_positions() {
        let values: Vec<i64> = (0..10).collect();
        let schema = schema(&["a", "b", "c"]);
        for splits in SPLITS {
            let inputs = vec![
                failing("a", &values, &[2, 7], splits),
                range("b", 10, &[4, 6]),
                failing("c", &values, &[0, 7, 8], &[10]),
            ];
            let mut zip = ZipOp::new(inputs, schema.clone());
            // element 0: c fails; 2: a fails; 7: a and c fail (one error); 8: c fails.
            let expected = ["Err", "1,1,1", "Err", "3,3,3", "4,4,4", "5,5,5", "6,6,6", "Err", "Err", "9,9,9"];
            assert_eq!(drain(&mut zip, &schema), expected, "{splits:?}");
        }
    }

    #[test]
    fn zip_ends_at_the_shortest_input_around_errors() {
        let values: Vec<i64> = (0..6).collect();
        // The shorter first input ends before the failing element is pulled (tf.data stops
        // pulling the components at the first end).
        let schema_ab = schema(&["a", "b"]);
        let inputs = vec![range("a", 3, &[3]), failing("b", &values, &[3, 4], &[6])];
        let mut zip = ZipOp::new(inputs, schema_ab.clone());
        assert_eq!(drain(&mut zip, &schema_ab), pairs(0..3));
        // A failing first input reports its error, then the zip ends with the second input.
        let schema_ba = schema(&["b", "a"]);
        let inputs = vec![failing("b", &values, &[3, 4], &[2, 4]), range("a", 3, &[1, 2])];
        let mut zip = ZipOp::new(inputs, schema_ba.clone());
        let mut expected = pairs(0..3);
        expected.push("Err".into());
        assert_eq!(drain(&mut zip, &schema_ba), expected);
        // Without errors: the shortest input, wherever it is.
        let schema_abc = schema(&["a", "b", "c"]);
        let inputs = vec![range("a", 5, &[5]), range("b", 3, &[2, 1]), range("c", 4, &[1, 3])];
        let mut zip = ZipOp::new(inputs, schema_abc.clone());
        assert_eq!(drain(&mut zip, &schema_abc), ["0,0,0", "1,1,1", "2,2,2"]);
    }

    #[test]
    fn zip_under_ignore_errors_drops_only_the_failed_elements() {
        let values: Vec<i64> = (0..10).collect();
        let schema = schema(&["a", "b"]);
        let inputs = vec![range("a", 10, &[3, 7]), failing("b", &values, &[0, 5, 9], &[4, 6])];
        let mut op = IgnoreErrorsOp::new(Box::new(ZipOp::new(inputs, schema.clone())));
        let expected: Vec<String> = [1, 2, 3, 4, 6, 7, 8].iter().map(|i| format!("{i},{i}")).collect();
        assert_eq!(drain(&mut op, &schema), expected);
    }
}

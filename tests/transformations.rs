//! Every transformation against tf.data's documented behaviour (the expected values are the
//! outputs printed in tf.data's API documentation, or worked out by hand from its rules).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use flumen::prelude::*;
use flumen::{Error, Options};

fn range(a: i64, b: i64) -> Dataset {
    Dataset::range(a, b).unwrap()
}

/// Small chunks so operators see elements split across chunk boundaries.
fn small_chunks(ds: Dataset) -> Dataset {
    ds.with_options(Options::default().with_chunk_rows(3))
}

#[test]
fn map_computes_adds_and_replaces_fields() {
    let ds = range(0, 5).map(MapFunction::with_fields([("y", col("value") * lit(10i64))])).unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, 1, 2, 3, 4]);
    assert_eq!(ints(&ds, "y"), vec![0, 10, 20, 30, 40]);
    let replaced = ds.map(MapFunction::with_fields([("value", col("value") + lit(1i64))])).unwrap();
    assert_eq!(replaced.element_spec().field_names(), vec!["value", "y"]);
    assert_eq!(ints(&replaced, "value"), vec![1, 2, 3, 4, 5]);
    let selected = ds.map(MapFunction::select([("z", col("y") - col("value"))])).unwrap();
    assert_eq!(selected.element_spec().field_names(), vec!["z"]);
    assert_eq!(ints(&selected, "z"), vec![0, 9, 18, 27, 36]);
}

#[test]
fn map_with_parallel_arguments_keeps_order() {
    let ds = range(0, 20)
        .map_with(
            MapFunction::with_fields([("y", col("value") * lit(2i64))]),
            Parallel { num_parallel_calls: Tunable::Autotune, deterministic: Some(true) },
        )
        .unwrap();
    assert_eq!(ints(&ds, "y"), (0..20).map(|x| 2 * x).collect::<Vec<_>>());
}

#[test]
fn filter_keeps_matching_elements() {
    // tf.data: range(1, 4).filter(lambda x: x < 3) -> [1, 2]
    let ds = range(1, 4).filter(col("value").lt(lit(3i64))).unwrap();
    assert_eq!(ints(&ds, "value"), vec![1, 2]);
    let none = small_chunks(range(0, 10)).filter(col("value").gt(lit(100i64))).unwrap();
    assert!(ints(&none, "value").is_empty());
}

#[test]
fn closures_per_element_and_per_batch() {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    let neg = MapFunction::element(Some("neg"), spec.clone(), |row| {
        let v = column_i64(row, "value");
        Ok(int_batch("value", v.iter().map(|x| -x).collect()))
    });
    let ds = small_chunks(range(0, 7)).map(neg).unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, -1, -2, -3, -4, -5, -6]);
    let double = MapFunction::batch(Some("double"), spec, |chunk| {
        Ok(int_batch("value", column_i64(chunk, "value").iter().map(|x| x * 2).collect()))
    });
    let ds = ds.map(double).unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, -2, -4, -6, -8, -10, -12]);
    let odd = PredicateFunction::element(Some("odd"), |row| Ok(column_i64(row, "value")[0] % 4 != 0));
    assert_eq!(ints(&ds.filter(odd).unwrap(), "value"), vec![-2, -6, -10]);
}

#[test]
fn batch_keeps_or_drops_the_remainder() {
    // tf.data: range(8).batch(3) -> [0 1 2] [3 4 5] [6 7]; drop_remainder -> first two
    let ds = small_chunks(range(0, 8));
    assert_eq!(int_batches(&ds.batch(3).unwrap(), "value"), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    assert_eq!(int_batches(&ds.batch_with(3, true).unwrap(), "value"), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    assert_eq!(ds.batch(3).unwrap().element_spec().fields[0].shape, vec![-1]);
    assert_eq!(ds.batch_with(3, true).unwrap().element_spec().fields[0].shape, vec![3]);
}

#[test]
fn batch_of_batches_nests() {
    let ds = range(0, 8).batch_with(2, true).unwrap().batch(3).unwrap();
    assert_eq!(ds.element_spec().fields[0].shape, vec![-1, 2]);
    let batches = int_matrix_batches(&ds, "value");
    assert_eq!(batches, vec![vec![vec![0, 1], vec![2, 3], vec![4, 5]], vec![vec![6, 7]]]);
}

#[test]
fn padded_batch_pads_to_the_longest() {
    // tf.data: range(1, 5).map(lambda x: tf.fill([x], x)).padded_batch(2)
    //   -> [[1 0] [2 2]], [[3 3 3 0] [4 4 4 4]]
    let data = ragged_batch("x", vec![vec![1], vec![2, 2], vec![3, 3, 3], vec![4, 4, 4, 4]]);
    let ds = Dataset::from_batches(vec![data]).unwrap();
    let padded = ds.padded_batch(2, PaddedBatchOptions::default()).unwrap();
    assert_eq!(
        int_matrix_batches(&padded, "x"),
        vec![vec![vec![1, 0], vec![2, 2]], vec![vec![3, 3, 3, 0], vec![4, 4, 4, 4]]]
    );
    // padded_shapes=[5], padding_values=-1
    let options = PaddedBatchOptions {
        padded_shapes: BTreeMap::from([("x".to_string(), vec![5])]),
        padding_values: BTreeMap::from([("x".to_string(), lit(-1i64))]),
        drop_remainder: false,
    };
    let padded = ds.padded_batch(3, options).unwrap();
    assert_eq!(padded.element_spec().fields[0].shape, vec![-1, 5]);
    assert_eq!(
        int_matrix_batches(&padded, "x"),
        vec![vec![vec![1, -1, -1, -1, -1], vec![2, 2, -1, -1, -1], vec![3, 3, 3, -1, -1]], vec![vec![4, 4, 4, 4, -1]]]
    );
}

#[test]
fn unbatch_and_rebatch() {
    // tf.data: [[1, 2, 3], [4, 5]] unbatched -> 1 2 3 4 5
    let ds = Dataset::from_batches(vec![ragged_batch("x", vec![vec![1, 2, 3], vec![], vec![4, 5]])]).unwrap();
    assert_eq!(ints(&ds.unbatch().unwrap(), "x"), vec![1, 2, 3, 4, 5]);
    // range(8).batch(4).rebatch(3) -> [0 1 2] [3 4 5] [6 7]
    let re = range(0, 8).batch(4).unwrap().rebatch(3, false).unwrap();
    assert_eq!(int_batches(&re, "value"), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
    let dropped = range(0, 8).batch(4).unwrap().rebatch(3, true).unwrap();
    assert_eq!(int_batches(&dropped, "value"), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    // batch then unbatch is the identity
    let round = small_chunks(range(0, 10)).batch(4).unwrap().unbatch().unwrap();
    assert_eq!(ints(&round, "value"), (0..10).collect::<Vec<_>>());
}

#[test]
fn shuffle_is_a_seeded_permutation() {
    let ds = small_chunks(range(0, 100)).shuffle_with(10, Some(42), false).unwrap();
    let first = ints(&ds, "value");
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "a permutation of the input");
    assert_ne!(first, (0..100).collect::<Vec<_>>(), "not the input order");
    assert_eq!(ints(&ds, "value"), first, "same seed, no reshuffle: same order");
    let again = small_chunks(range(0, 100)).shuffle_with(10, Some(42), false).unwrap();
    assert_eq!(ints(&again, "value"), first, "same seed in a new dataset: same order");
    let other = small_chunks(range(0, 100)).shuffle_with(10, Some(7), false).unwrap();
    assert_ne!(ints(&other, "value"), first, "another seed: another order");
    // A buffer of 10 never moves an element more than 9 places earlier.
    for (pos, v) in first.iter().enumerate() {
        assert!(*v as usize <= pos + 9, "{v} at {pos}");
    }
    let identity = range(0, 20).shuffle(1, Some(3)).unwrap();
    assert_eq!(ints(&identity, "value"), (0..20).collect::<Vec<_>>());
}

#[test]
fn shuffle_reshuffles_each_epoch_and_iteration() {
    let ds = range(0, 50).shuffle(50, Some(1)).unwrap().repeat(Some(2)).unwrap();
    let values = ints(&ds, "value");
    let (a, b) = values.split_at(50);
    assert_ne!(a, b, "each epoch gets a new order");
    let next_iteration = ints(&ds, "value");
    assert_ne!(values, next_iteration, "each iteration gets a new order");
    let fixed = range(0, 50).shuffle_with(50, Some(1), false).unwrap().repeat(Some(2)).unwrap();
    let values = ints(&fixed, "value");
    assert_eq!(values[..50], values[50..], "no reshuffle: every epoch the same");
    // The sequence of orders is itself reproducible from the seed.
    let replay = range(0, 50).shuffle(50, Some(1)).unwrap().repeat(Some(2)).unwrap();
    assert_eq!(ints(&replay, "value")[..50], a[..]);
}

#[test]
fn repeat_take_skip_shard() {
    assert_eq!(ints(&range(0, 3).repeat(Some(2)).unwrap(), "value"), vec![0, 1, 2, 0, 1, 2]);
    assert!(ints(&range(0, 3).repeat(Some(0)).unwrap(), "value").is_empty());
    assert!(ints(&range(0, 0).repeat(None).unwrap(), "value").is_empty(), "forever over empty ends");
    assert_eq!(ints(&range(0, 3).repeat(None).unwrap().take(7).unwrap(), "value"), vec![0, 1, 2, 0, 1, 2, 0]);
    let ds = small_chunks(range(0, 10));
    assert_eq!(ints(&ds.take(4).unwrap(), "value"), vec![0, 1, 2, 3]);
    assert_eq!(ints(&ds.take(-1).unwrap(), "value").len(), 10);
    assert_eq!(ints(&ds.skip(7).unwrap(), "value"), vec![7, 8, 9]);
    assert!(ints(&ds.skip(-1).unwrap(), "value").is_empty());
    assert_eq!(ints(&ds.skip(20).unwrap(), "value"), Vec::<i64>::new());
    // tf.data: range(10).shard(num_shards=3, index=0) -> 0 3 6 9; index 1 -> 1 4 7
    assert_eq!(ints(&ds.shard(3, 0).unwrap(), "value"), vec![0, 3, 6, 9]);
    assert_eq!(ints(&ds.shard(3, 1).unwrap(), "value"), vec![1, 4, 7]);
    assert_eq!(ints(&ds.shard(3, 2).unwrap(), "value"), vec![2, 5, 8]);
}

#[test]
fn enumerate_zip_concatenate() {
    // tf.data: range(1, 4).enumerate(start=5) -> (5, 1) (6, 2) (7, 3)
    let e = range(1, 4).enumerate(5).unwrap();
    assert_eq!(ints(&e, "index"), vec![5, 6, 7]);
    assert_eq!(ints(&e, "value"), vec![1, 2, 3]);
    // zip of range(1, 4) and range(4, 7) -> (1, 4) (2, 5) (3, 6); shortest wins
    let b = range(4, 9).map(MapFunction::select([("other", col("value"))])).unwrap();
    let z = Dataset::zip(&[&small_chunks(range(1, 4)), &b]).unwrap();
    assert_eq!(ints(&z, "value"), vec![1, 2, 3]);
    assert_eq!(ints(&z, "other"), vec![4, 5, 6]);
    // concatenate range(1, 4) and range(4, 8) -> 1..7
    let c = range(1, 4).concatenate(&range(4, 8)).unwrap();
    assert_eq!(ints(&c, "value"), (1..8).collect::<Vec<_>>());
}

#[test]
fn concatenate_of_batches_with_different_static_sizes() {
    let a = range(0, 4).batch_with(2, true).unwrap();
    let b = range(10, 13).batch_with(3, true).unwrap();
    let c = a.concatenate(&b).unwrap();
    assert_eq!(c.element_spec().fields[0].shape, vec![-1]);
    assert_eq!(int_batches(&c, "value"), vec![vec![0, 1], vec![2, 3], vec![10, 11, 12]]);
}

#[test]
fn interleave_follows_tf_data_order() {
    // tf.data docs: range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
    //   cycle_length=2, block_length=4)
    let expected = vec![1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5];
    let spec = range(0, 1).element_spec().clone();
    let six =
        DatasetFunction::closure(Some("six"), spec, |row| Dataset::from_batches(vec![row.clone()])?.repeat(Some(6)));
    let ds = range(1, 6).interleave(six, Tunable::Fixed(2), 4).unwrap();
    assert_eq!(ints(&ds, "value"), expected);
}

#[test]
fn interleave_of_uneven_inputs_refills_slots_in_turn() {
    // Element x yields x copies of x; cycle 2, block 1. As in tf.data's InterleaveDatasetOp,
    // an exhausted slot is cleared and the cycle moves on; the slot is refilled from the
    // input only when the cycle comes back to it:
    // 1(s0) 2(s1) | s0 ends -> 2(s1) | s0 <- 3: 3 | s1 ends -> 3(s0) | s1 <- 4: 4 | 3 4 | s0 ends -> 4 | 4
    let spec = range(0, 1).element_spec().clone();
    let copies = DatasetFunction::closure(Some("copies"), spec, |row| {
        let x = column_i64(row, "value")[0] as u64;
        Dataset::from_batches(vec![row.clone()])?.repeat(Some(x))
    });
    let ds = range(1, 5).interleave(copies, Tunable::Fixed(2), 1).unwrap();
    assert_eq!(ints(&ds, "value"), vec![1, 2, 2, 3, 3, 4, 3, 4, 4, 4]);
}

/// tf.data's deterministic interleave order over in-memory `inputs`: a slot is read
/// `block` elements at a time; one found exhausted is cleared and the cycle moves on; an
/// empty slot is filled from the next input when the cycle reaches it.
fn interleave_reference(inputs: &[Vec<i64>], cycle: usize, block: usize) -> Vec<i64> {
    let mut pending = inputs.iter();
    let mut slots: Vec<Option<std::collections::VecDeque<i64>>> = vec![None; cycle];
    let (mut out, mut i, mut taken, mut input_done) = (Vec::new(), 0, 0, false);
    while !(input_done && slots.iter().all(Option::is_none)) {
        match &mut slots[i] {
            None if input_done => i = (i + 1) % cycle,
            None => match pending.next() {
                Some(values) => slots[i] = Some(values.iter().copied().collect()),
                None => input_done = true,
            },
            Some(slot) => match slot.pop_front() {
                Some(x) => {
                    out.push(x);
                    taken += 1;
                    if taken == block {
                        (taken, i) = (0, (i + 1) % cycle);
                    }
                }
                None => {
                    slots[i] = None;
                    (taken, i) = (0, (i + 1) % cycle);
                }
            },
        }
    }
    out
}

#[test]
fn interleave_of_multi_row_chunks_follows_tf_data_order() {
    // Element x yields LENS[x] values 100x, 100x + 1, ... in chunks of CHUNKS[x] rows, so
    // whole rounds of blocks are often buffered in every slot (and often not).
    const LENS: [i64; 6] = [7, 12, 5, 30, 4, 9];
    const CHUNKS: [i64; 6] = [4, 5, 3, 12, 2, 9];
    let inputs: Vec<Vec<i64>> = (0..6).map(|x| (0..LENS[x]).map(|v| 100 * x as i64 + v).collect()).collect();
    let spec = range(0, 1).element_spec().clone();
    let shared = Arc::new(inputs.clone());
    let values = DatasetFunction::closure(Some("values"), spec, move |row| {
        let x = column_i64(row, "value")[0] as usize;
        Dataset::from_batches(shared[x].chunks(CHUNKS[x] as usize).map(|c| int_batch("value", c.to_vec())).collect())
    });
    for (cycle, block) in [(3, 2), (2, 1), (4, 3), (3, 5)] {
        let ds = range(0, 6).interleave(values.clone(), Tunable::Fixed(cycle as u32), block as u64).unwrap();
        assert_eq!(ints(&ds, "value"), interleave_reference(&inputs, cycle, block), "cycle {cycle}, block {block}");
    }
}

#[test]
fn flat_map_from_tensor_slices() {
    let ds = range(0, 7).batch(3).unwrap().flat_map(DatasetFunction::FromTensorSlices).unwrap();
    assert_eq!(ints(&ds, "value"), (0..7).collect::<Vec<_>>());
}

#[test]
fn window_matches_tf_data_examples() {
    // tf.data: range(7).window(3, shift=2, stride=1) -> [0 1 2] [2 3 4] [4 5 6] [6]
    let ds = small_chunks(range(0, 7));
    assert_eq!(
        int_batches(&ds.window(3, 2, 1, false).unwrap(), "value"),
        vec![vec![0, 1, 2], vec![2, 3, 4], vec![4, 5, 6], vec![6]]
    );
    assert_eq!(
        int_batches(&ds.window(3, 2, 1, true).unwrap(), "value"),
        vec![vec![0, 1, 2], vec![2, 3, 4], vec![4, 5, 6]]
    );
    // range(7).window(3, shift=1, stride=2) -> [0 2 4] [1 3 5] [2 4 6] [3 5] [4 6] [5] [6]
    assert_eq!(
        int_batches(&ds.window(3, 1, 2, false).unwrap(), "value"),
        vec![vec![0, 2, 4], vec![1, 3, 5], vec![2, 4, 6], vec![3, 5], vec![4, 6], vec![5], vec![6]]
    );
}

#[test]
fn scan_and_reduce() {
    // tf.data: range(10).scan(0, lambda s, i: (s + i, s + i)) -> 0 1 3 6 10 15 21 28 36 45
    let ds = range(0, 10)
        .scan(
            &[("sum".into(), lit(0i64))],
            &[("sum".into(), col("sum") + col("value"))],
            &[("running".into(), col("sum"))],
        )
        .unwrap();
    assert_eq!(ints(&ds, "running"), vec![0, 1, 3, 6, 10, 15, 21, 28, 36, 45]);
    // range(5).reduce(0, lambda s, _: s + 1) -> 5; sum -> 10
    let state = small_chunks(range(0, 5))
        .reduce(
            &[("count".into(), lit(0i64)), ("sum".into(), lit(0i64))],
            &[("count".into(), col("count") + lit(1i64)), ("sum".into(), col("sum") + col("value"))],
        )
        .unwrap();
    assert_eq!(column_i64(&state, "count"), vec![5]);
    assert_eq!(column_i64(&state, "sum"), vec![10]);
}

/// tf.data's `scan_func` as a closure: `(state, element) -> (new state, output)` over the
/// one-row scope of the state's fields then the element's.
fn running_total(fail_at: i64) -> MapFunction {
    let output = ElementSpec::new(vec![FieldSpec::scalar("running", DType::Int64)]).unwrap();
    MapFunction::element(Some("running_total"), output, move |scope| {
        let (s, v) = (column_i64(scope, "s")[0], column_i64(scope, "value")[0]);
        if v == fail_at {
            return Err(Error::execution("running_total", format!("refuses {v}")));
        }
        let s = s + v;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("running", arrow::datatypes::DataType::Int64, true),
        ]));
        let column = |v: i64| Arc::new(arrow::array::Int64Array::from(vec![v])) as arrow::array::ArrayRef;
        Ok(arrow::record_batch::RecordBatch::try_new(schema, vec![column(s), column(s * 10)])?)
    })
}

#[test]
fn scan_with_a_closure_threads_its_state_and_keeps_it_on_failure() {
    // tf.data: range(6).scan(0, lambda s, i: (s + i, 10 * (s + i))) -> 0 10 30 60 100 150
    let ds = small_chunks(range(0, 6)).scan_with(&[("s".into(), lit(0i64))], running_total(-1)).unwrap();
    assert_eq!(ds.element_spec().to_string(), "{running: int64[]}");
    assert_eq!(ints(&ds, "running"), vec![0, 10, 30, 60, 100, 150]);
    // Element 3 fails: its place is an error, and the state goes on from before it.
    let failing = small_chunks(range(0, 6)).scan_with(&[("s".into(), lit(0i64))], running_total(3)).unwrap();
    let items: Vec<std::result::Result<i64, String>> =
        failing.iter().map(|e| e.map(|e| column_i64(&e, "running")[0]).map_err(|e| e.to_string())).collect();
    assert_eq!(items[..3], [Ok(0), Ok(10), Ok(30)]);
    assert!(items[3].as_ref().is_err_and(|e| e.contains("refuses 3")), "{:?}", items[3]);
    assert_eq!(items[4..], [Ok(70), Ok(120)]);
    // A second pass starts from the initial state again, as a new tf.data iterator does.
    assert_eq!(ints(&ds, "running"), vec![0, 10, 30, 60, 100, 150]);
    let explain = ds.explain();
    assert!(explain.contains("scan(state s = 0; closure 'running_total"), "{explain}");
    assert!(explain.contains("prefetch"), "{explain}");
    // A function whose calls take a process-wide lock (Python's) gets no prefetch after it.
    let locked = range(0, 6).scan_with(&[("s".into(), lit(0i64))], running_total(-1).exclusive()).unwrap();
    assert!(!locked.explain().contains("prefetch"), "{}", locked.explain());
}

#[test]
fn take_while_stops_at_the_first_failure() {
    let ds = small_chunks(range(0, 10)).take_while(col("value").lt(lit(5i64))).unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, 1, 2, 3, 4]);
}

#[test]
fn group_by_window_matches_tf_data_example() {
    // tf.data: range(10).group_by_window(key_func=lambda x: x % 2,
    //   reduce_func=lambda k, ds: ds.batch(5), window_size=5) -> [0 2 4 6 8] [1 3 5 7 9]
    let ds = range(0, 10).group_by_window(col("value") % lit(2i64), 5).unwrap();
    assert_eq!(int_batches(&ds, "value"), vec![vec![0, 2, 4, 6, 8], vec![1, 3, 5, 7, 9]]);
    // Incomplete groups are flushed at the end in key order.
    let ds = range(0, 7).group_by_window(lit(1i64) - col("value") % lit(2i64), 3).unwrap();
    assert_eq!(int_batches(&ds, "value"), vec![vec![0, 2, 4], vec![1, 3, 5], vec![6]]);
}

#[test]
fn bucket_by_sequence_length_matches_tf_data_example() {
    // tf.data docs: elements [[0], [1,2,3,4], [5,6,7], [7,8,9,10,11], [13,14,15,16,19,20], [21,22]]
    // bucket_boundaries=[3, 5], bucket_batch_sizes=[2, 2, 2]
    // -> [[1 2 3 4] [5 6 7 0]], [[ 7 8 9 10 11 0] [13 14 15 16 19 20]], [[ 0 0] [21 22]]
    let rows = vec![
        vec![0],
        vec![1, 2, 3, 4],
        vec![5, 6, 7],
        vec![7, 8, 9, 10, 11],
        vec![13, 14, 15, 16, 19, 20],
        vec![21, 22],
    ];
    let ds = Dataset::from_batches(vec![ragged_batch("x", rows)]).unwrap();
    let bucketed =
        ds.bucket_by_sequence_length(length(col("x")), vec![3, 5], vec![2, 2, 2], BucketOptions::default()).unwrap();
    assert_eq!(
        int_matrix_batches(&bucketed, "x"),
        vec![
            vec![vec![1, 2, 3, 4], vec![5, 6, 7, 0]],
            vec![vec![7, 8, 9, 10, 11, 0], vec![13, 14, 15, 16, 19, 20]],
            vec![vec![0, 0], vec![21, 22]],
        ]
    );
}

#[test]
fn choose_from_datasets_follows_its_choices() {
    let (a, b) = (range(0, 3), range(100, 200));
    let choices = |c: Vec<i64>| Dataset::from_batches(vec![int_batch("value", c)]).unwrap();
    // tf.data: choose_from_datasets([range(3), range(100, 200)], [1, 0, 0, 1, 0, 0, 1])
    let ds = Dataset::choose_from_datasets(&[&a, &b], &choices(vec![1, 0, 0, 1, 0, 0, 1]), true).unwrap();
    assert_eq!(ints(&ds, "value"), vec![100, 0, 1, 101, 2]);
    let skipping = Dataset::choose_from_datasets(&[&a, &b], &choices(vec![1, 0, 0, 1, 0, 0, 1]), false).unwrap();
    assert_eq!(ints(&skipping, "value"), vec![100, 0, 1, 101, 2, 102]);
    // A choice outside the inputs is an error in its place.
    let bad = Dataset::choose_from_datasets(&[&a, &b], &choices(vec![0, 2, 1]), true).unwrap();
    let items: Vec<_> = bad.iter().map(|e| e.map(|e| column_i64(&e, "value")[0]).map_err(|e| e.to_string())).collect();
    assert_eq!(items[0], Ok(0));
    assert!(items[1].as_ref().is_err_and(|e| e.contains("choice 2 is outside [0, 2)")), "{items:?}");
    assert_eq!(items[2], Ok(100));
    // The choices are one int64 scalar field.
    let two = Dataset::from_batches(vec![int_batch("a", vec![0])]).unwrap().enumerate(0).unwrap();
    let err = Dataset::choose_from_datasets(&[&a], &two, true).unwrap_err().to_string();
    assert!(err.contains("the choice dataset has one int64 field"), "{err}");
}

#[test]
fn sample_from_datasets_is_seeded_and_weighted() {
    let a = range(0, 1000);
    let b = range(1000, 2000);
    let ds = Dataset::sample_from_datasets(&[&a, &b], vec![0.8, 0.2], Some(5), false).unwrap();
    let values = ints(&ds, "value");
    assert_eq!(values.len(), 2000, "both inputs are drained when stop_on_empty_dataset is false");
    assert_eq!(values, ints(&ds, "value"), "seeded: the same draws every iteration");
    let first_400_from_a = values[..400].iter().filter(|v| **v < 1000).count();
    assert!((280..=360).contains(&first_400_from_a), "~80% from a, got {first_400_from_a}/400");
    let a_order: Vec<i64> = values.iter().copied().filter(|v| *v < 1000).collect();
    assert_eq!(a_order, (0..1000).collect::<Vec<_>>(), "each input keeps its order");
    let only_a = Dataset::sample_from_datasets(&[&a, &b], vec![1.0, 0.0], Some(5), true).unwrap();
    assert_eq!(ints(&only_a, "value"), (0..1000).collect::<Vec<_>>());
    let stop = Dataset::sample_from_datasets(&[&range(0, 5), &b], vec![0.5, 0.5], Some(9), true).unwrap();
    let values = ints(&stop, "value");
    assert!(values.iter().filter(|v| **v < 5).count() <= 5 && values.len() < 1005);
}

#[test]
fn cache_replays_the_first_complete_pass() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    let ds = Dataset::from_generator(Some("counted"), spec, move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::new((0..3).map(|i| Ok(int_batch("value", vec![2 * i, 2 * i + 1]))))
    })
    .unwrap()
    .cache()
    .unwrap();
    // A partial pass fills nothing.
    let mut it = ds.iter();
    it.next().unwrap().unwrap();
    drop(it);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let repeated = ds.repeat(Some(3)).unwrap();
    assert_eq!(ints(&repeated, "value"), [0, 1, 2, 3, 4, 5].repeat(3));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one more complete pass, then memory");
    assert_eq!(ints(&ds, "value"), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a new iterator reads the cache too");
}

#[test]
fn prefetch_is_the_identity() {
    let ds = small_chunks(range(0, 10)).prefetch(Tunable::Autotune).unwrap();
    assert_eq!(ints(&ds, "value"), (0..10).collect::<Vec<_>>());
}

fn reciprocal_or_error() -> MapFunction {
    // tf.data docs: from_tensor_slices([1., 2., 0., 4.]).map(check_numerics(1/x)).ignore_errors()
    //   -> [1.0, 0.5, 0.25]
    let spec = ElementSpec::new(vec![FieldSpec::scalar("x", DType::Float64)]).unwrap();
    MapFunction::element(Some("reciprocal"), spec, |row| {
        let x = column_f64(row, "x")[0];
        if x == 0.0 {
            return Err(Error::execution("reciprocal", "division by zero"));
        }
        Ok(float_batch("x", vec![1.0 / x]))
    })
}

#[test]
fn ignore_errors_drops_exactly_the_failing_elements() {
    let ds = Dataset::from_batches(vec![float_batch("x", vec![1.0, 2.0, 0.0, 4.0])]).unwrap();
    let mapped = ds.map(reciprocal_or_error()).unwrap();
    let mut it = mapped.iter();
    assert_eq!(column_f64(&it.next().unwrap().unwrap(), "x"), vec![1.0]);
    assert_eq!(column_f64(&it.next().unwrap().unwrap(), "x"), vec![0.5]);
    let err = it.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("division by zero"), "{err}");
    assert_eq!(column_f64(&it.next().unwrap().unwrap(), "x"), vec![0.25], "iteration continues after an error");
    assert!(it.next().is_none());
    let ignored = mapped.ignore_errors().unwrap();
    let values: Vec<f64> = ignored.iter_chunks().flat_map(|c| column_f64(&c.unwrap(), "x")).collect();
    assert_eq!(values, vec![1.0, 0.5, 0.25]);
}

#[test]
fn expression_errors_are_isolated_per_element() {
    // Integer division by zero fails for element 3 only.
    let ds = small_chunks(range(0, 6))
        .map(MapFunction::with_fields([("q", lit(12i64) / (col("value") - lit(3i64)))]))
        .unwrap();
    let (before, err) = until_error(&ds, "q");
    assert_eq!(before, vec![-4, -6, -12]);
    assert!(err.expect("an error").to_lowercase().contains("zero"));
    let ignored = ds.ignore_errors().unwrap();
    assert_eq!(ints(&ignored, "q"), vec![-4, -6, -12, 12, 6]);
}

#[test]
fn a_panicking_closure_becomes_an_error() {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    let boom = MapFunction::element(Some("boom"), spec, |row| {
        if column_i64(row, "value")[0] == 2 {
            panic!("element two is cursed");
        }
        Ok(row.clone())
    });
    let ds = range(0, 4).map(boom).unwrap();
    let (before, err) = until_error(&ds, "value");
    assert_eq!(before, vec![0, 1]);
    let err = err.expect("an error");
    assert!(err.contains("boom") && err.contains("element two is cursed"), "{err}");
}

#[test]
fn a_closure_returning_the_wrong_spec_is_an_error() {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    let liar = MapFunction::element(Some("liar"), spec, |_| Ok(float_batch("value", vec![1.0])));
    let err = range(0, 2).map(liar).unwrap().iter().next().unwrap().unwrap_err().to_string();
    assert!(err.contains("liar") && err.contains("declared"), "{err}");
}

#[test]
fn batched_expression_maps_apply_elementwise() {
    // A map after batch sees each field as a vector, as in tf.data.
    let ds = range(0, 5).batch(2).unwrap().map(MapFunction::with_fields([("y", col("value") * lit(3i64))])).unwrap();
    assert_eq!(ds.element_spec().fields[1].shape, vec![-1]);
    assert_eq!(int_batches(&ds, "y"), vec![vec![0, 3], vec![6, 9], vec![12]]);
}

#[test]
fn a_failing_input_under_repeat_and_ignore_errors_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.txt");
    std::fs::write(&path, "a\n").unwrap();
    let ds = Dataset::text_lines(&[path.to_str().unwrap()]).unwrap().repeat(None).unwrap().ignore_errors().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(ds.iter().count(), 0, "the missing file ends the pipeline instead of spinning");
}

#[test]
fn datasets_returned_by_closures_keep_their_own_closures() {
    let spec = range(0, 1).element_spec().clone();
    let inner_spec = spec.clone();
    let f = DatasetFunction::closure(Some("with_inner_closure"), spec, move |row| {
        let plus_ten = MapFunction::element(Some("plus_ten"), inner_spec.clone(), |r| {
            Ok(int_batch("value", column_i64(r, "value").iter().map(|v| v + 10).collect()))
        });
        Dataset::from_batches(vec![row.clone()])?.map(plus_ten)
    });
    let ds = range(0, 3).flat_map(f).unwrap();
    assert_eq!(ints(&ds, "value"), vec![10, 11, 12]);
}

/// `range(a, b)` whose element `k` fails (integer division by zero), keeping `value`.
fn failing_at(a: i64, b: i64, k: i64) -> Dataset {
    range(a, b).map(MapFunction::with_fields([("q", lit(1i64) / (col("value") - lit(k)))])).unwrap()
}

/// The values of `field` per item, with `None` for an error item.
fn items(ds: &Dataset, field: &str) -> Vec<Option<Vec<i64>>> {
    ds.iter().map(|e| e.ok().map(|b| column_i64(&b, field))).collect()
}

#[test]
fn caches_of_dropped_datasets_are_never_served_to_new_ones() {
    let base = range(0, 5);
    for k in 1..=3i64 {
        let cached = base.map(MapFunction::select([("value", col("value") + lit(100 * k))])).unwrap().cache().unwrap();
        assert_eq!(ints(&cached, "value"), (100 * k..100 * k + 5).collect::<Vec<_>>(), "k = {k}");
    }
    // Each call of a dataset function makes its own cache, as each tf.data function call does.
    let spec = range(0, 1).element_spec().clone();
    let f = DatasetFunction::closure(Some("cached_range"), spec, |row| {
        let x = column_i64(row, "value")[0];
        Dataset::range(10 * x, 10 * x + 3)?.cache()
    });
    let ds = range(0, 3).flat_map(f).unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, 1, 2, 10, 11, 12, 20, 21, 22]);
}

#[test]
fn cache_completes_like_tf_data() {
    // Failed elements are passed on and not recorded; the pass still completes the cache.
    let ds = failing_at(0, 5, 2).cache().unwrap().repeat(Some(2)).unwrap();
    let got = items(&ds, "value");
    let expected: Vec<Option<Vec<i64>>> = vec![
        Some(vec![0]),
        Some(vec![1]),
        None,
        Some(vec![3]),
        Some(vec![4]),
        Some(vec![0]),
        Some(vec![1]),
        Some(vec![3]),
        Some(vec![4]),
    ];
    assert_eq!(got, expected);
    // A cache whose input has a known size completes once it holds that many elements, even
    // if the consumer stops there: the second epoch replays the first shuffle order.
    let ds = range(0, 6).shuffle(6, Some(3)).unwrap().cache().unwrap().take(6).unwrap().repeat(Some(2)).unwrap();
    let values = ints(&ds, "value");
    assert_eq!(values[..6], values[6..]);
}

#[test]
fn a_cache_completes_at_the_count_its_plan_was_written_with() {
    // As written, `filter(true)` leaves the count unknown, so the cache cut by `take` does not
    // complete and the second epoch reshuffles; the optimizer drops the filter, which makes
    // the count known, and must not make the cache complete by it.
    let epochs = |filtered: bool, options: Options| {
        let ds = if filtered { range(0, 6).filter(lit(true)).unwrap() } else { range(0, 6) };
        let ds = ds.shuffle(6, Some(3)).unwrap().cache().unwrap().take(6).unwrap().repeat(Some(2)).unwrap();
        let values = ints(&ds.with_options(options), "value");
        (values[..6].to_vec(), values[6..].to_vec())
    };
    for options in [Options::default(), Options::default().without_optimizations()] {
        let (first, second) = epochs(true, options.clone());
        assert_ne!(first, second, "{options:?}: the cache completed by a count the plan was not written with");
        let (first, second) = epochs(false, options.clone());
        assert_eq!(first, second, "{options:?}: a count known as written completes the cache");
    }
}

#[test]
fn enumerate_counts_elements_not_errors_and_stops_at_the_largest_index() {
    // An error takes no index (tf.data's zip with a counter would use one up): enumerate
    // counts elements as take, skip and shard do.
    let ds = failing_at(0, 5, 2).enumerate(0).unwrap();
    let items: Vec<Option<i64>> = ds.iter().map(|item| item.ok().map(|b| common::column_i64(&b, "index")[0])).collect();
    assert_eq!(items, vec![Some(0), Some(1), None, Some(2), Some(3)]);
    let ds = ds.ignore_errors().unwrap();
    assert_eq!(ints(&ds, "index"), vec![0, 1, 2, 3]);
    assert_eq!(ints(&ds, "value"), vec![0, 1, 3, 4]);
    let near_max = range(0, 5).enumerate(i64::MAX - 2).unwrap();
    assert_eq!(ints(&near_max, "index"), vec![i64::MAX - 2, i64::MAX - 1]);
}

#[test]
fn shuffle_keeps_every_good_element_when_its_input_fails() {
    let ds = small_chunks(failing_at(0, 100, 50)).shuffle(10, Some(7)).unwrap();
    let errors = ds.iter().filter(|e| e.is_err()).count();
    assert_eq!(errors, 1);
    let mut values = ints(&ds.ignore_errors().unwrap(), "value");
    values.sort();
    assert_eq!(values, (0..100).filter(|v| *v != 50).collect::<Vec<_>>());
}

#[test]
fn take_while_reports_a_failing_predicate_for_that_element_only() {
    // tf.data: range(10).take_while(10 / (x - 3) < 100) -> 0 1 2, error, 4 .. 9
    let ds = small_chunks(range(0, 10)).take_while((lit(10i64) / (col("value") - lit(3i64))).lt(lit(100i64))).unwrap();
    let got = items(&ds, "value");
    let mut expected: Vec<Option<Vec<i64>>> = (0..3).map(|v| Some(vec![v])).collect();
    expected.push(None);
    expected.extend((4..10).map(|v| Some(vec![v])));
    assert_eq!(got, expected);
}

#[test]
fn a_generator_that_panicked_ends() {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Int64)]).unwrap();
    let ds = Dataset::from_generator(Some("fragile"), spec, || {
        let mut n = 0;
        Box::new(std::iter::from_fn(move || {
            n += 1;
            if n > 1 {
                panic!("broken");
            }
            Some(Ok(int_batch("v", vec![1])))
        }))
    })
    .unwrap();
    let got: Vec<bool> = ds.iter().map(|e| e.is_ok()).collect();
    assert_eq!(got, vec![true, false]);
    assert_eq!(ints(&ds.ignore_errors().unwrap(), "v"), vec![1], "ignore_errors does not spin");
}

#[test]
fn unseeded_randomness_is_drawn_once_per_dataset() {
    // tf.data: range(8).shuffle(8, reshuffle_each_iteration=False).repeat(3) repeats one order.
    let ds = range(0, 32).shuffle_with(32, None, false).unwrap();
    let epochs = ints(&ds.repeat(Some(3)).unwrap(), "value");
    assert_eq!(epochs[..32], epochs[32..64]);
    assert_eq!(epochs[..32], epochs[64..]);
    assert_eq!(ints(&ds, "value"), ints(&ds, "value"), "and across iterations");
    let reshuffled = range(0, 32).shuffle(32, None).unwrap().repeat(Some(2)).unwrap();
    let values = ints(&reshuffled, "value");
    assert_ne!(values[..32], values[32..], "reshuffling still reshuffles");
}

#[test]
fn zip_of_batches_of_different_sizes() {
    let a = range(0, 6).batch(2).unwrap();
    let b = range(10, 19).batch(3).unwrap().map(MapFunction::select([("w", col("value"))])).unwrap();
    let z = Dataset::zip(&[&a, &b]).unwrap();
    let elements: Vec<_> = z.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(elements.len(), 3);
    assert_eq!(list_values(elements[0].column(0).as_ref(), 0), vec![0, 1]);
    assert_eq!(list_values(elements[0].column(1).as_ref(), 0), vec![10, 11, 12]);
}

#[test]
fn per_element_closures_are_called_once_per_element_even_when_one_fails() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let spec = range(0, 1).element_spec().clone();
    let f = MapFunction::element(Some("counted_map"), spec, move |row| {
        counter.fetch_add(1, Ordering::SeqCst);
        if column_i64(row, "value")[0] == 8 {
            return Err(Error::execution("counted_map", "eight"));
        }
        Ok(row.clone())
    })
    .stateful();
    let ds = range(0, 10).map(f).unwrap().ignore_errors().unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, 1, 2, 3, 4, 5, 6, 7, 9]);
    assert_eq!(calls.load(Ordering::SeqCst), 10);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let p = PredicateFunction::element(Some("counted_filter"), move |row| {
        counter.fetch_add(1, Ordering::SeqCst);
        let v = column_i64(row, "value")[0];
        if v == 4 {
            return Err(Error::execution("counted_filter", "four"));
        }
        Ok(v % 2 == 0)
    });
    let ds = range(0, 10).filter(p).unwrap().ignore_errors().unwrap();
    assert_eq!(ints(&ds, "value"), vec![0, 2, 6, 8]);
    assert_eq!(seen.load(Ordering::SeqCst), 10);
}

#[test]
fn maps_compute_elementwise_over_tensor_fields() {
    use arrow::array::{Array, AsArray, FixedSizeListArray, Float32Array};
    use arrow::datatypes::{DataType, Field, Float32Type};

    // 10 elements: t = [3r, 3r+1, 3r+2] as float32[3], w = r + 1.
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let t = FixedSizeListArray::new(item, 3, Arc::new(Float32Array::from_iter_values((0..30).map(|v| v as f32))), None);
    let w = Float32Array::from_iter_values((0..10).map(|r| r as f32 + 1.0));
    let chunk = arrow::record_batch::RecordBatch::try_from_iter([
        ("t", Arc::new(t) as arrow::array::ArrayRef),
        ("w", Arc::new(w) as arrow::array::ArrayRef),
    ])
    .unwrap();
    // Two maps, which the optimizer fuses into one, then a batch it vectorizes.
    let ds = Dataset::from_batches(vec![chunk.slice(0, 4), chunk.slice(4, 6)])
        .unwrap()
        .map(MapFunction::select([("y", col("t") * col("w")), ("w", col("w"))]))
        .unwrap()
        .map(MapFunction::select([("z", col("y") - lit(1.0))]))
        .unwrap()
        .batch(4)
        .unwrap();
    let z = ds.element_spec().field("z").unwrap().clone();
    assert_eq!((z.dtype, z.shape), (DType::Float32, vec![-1, 3]));
    let mut got = vec![];
    for batch in ds.iter() {
        let column = batch.unwrap().column(0).clone();
        let rows = column.as_fixed_size_list();
        for r in 0..rows.len() {
            got.extend(rows.value(r).as_primitive::<Float32Type>().values().iter().copied());
        }
    }
    let want: Vec<f32> = (0..30).map(|v| v as f32 * ((v / 3) as f32 + 1.0) - 1.0).collect();
    assert_eq!(got, want);
    // clip and bucketize apply to every value of a tensor.
    let features = Dataset::from_batches(vec![chunk.clone()])
        .unwrap()
        .map(MapFunction::select([
            ("c", clip(col("t"), lit(2.0), lit(20.0))),
            ("b", bucketize(col("t"), &[5.0, 10.0])),
        ]))
        .unwrap();
    let spec = features.element_spec();
    assert_eq!(spec.field("b").map(|f| (f.dtype, f.shape.clone())), Some((DType::Int32, vec![3])));
    let (mut clipped, mut buckets) = (vec![], vec![]);
    for element in features.iter() {
        let element = element.unwrap();
        let c = element.column(0).as_fixed_size_list().value(0);
        clipped.extend(c.as_primitive::<Float32Type>().values().iter().copied());
        let b = element.column(1).as_fixed_size_list().value(0);
        buckets.extend(b.as_primitive::<arrow::datatypes::Int32Type>().values().iter().copied());
    }
    assert_eq!(clipped, (0..30).map(|v| (v as f32).clamp(2.0, 20.0)).collect::<Vec<_>>());
    assert_eq!(
        buckets,
        (0..30)
            .map(|v| if v < 5 {
                0
            } else if v < 10 {
                1
            } else {
                2
            })
            .collect::<Vec<_>>()
    );
    // Reductions give one value per element, usable in scalar and tensor expressions and in
    // filters; the element r has t = [3r, 3r+1, 3r+2] and w = r + 1.
    let reduced = Dataset::from_batches(vec![chunk.slice(0, 4), chunk.slice(4, 6)])
        .unwrap()
        .filter(reduce_mean(col("t")).gt(lit(4.0)))
        .unwrap()
        .map(MapFunction::select([
            ("s", reduce_sum(col("t"))),
            ("m", reduce_max(col("t") * col("w")) - reduce_min(col("t"))),
            ("n", col("t") / reduce_sum(col("t"))),
        ]))
        .unwrap();
    let spec = reduced.element_spec();
    assert_eq!(spec.field("s").map(|f| (f.dtype, f.shape.clone())), Some((DType::Float32, vec![])));
    assert_eq!(spec.field("n").map(|f| f.shape.clone()), Some(vec![3]));
    let mut rows = vec![];
    for element in reduced.iter() {
        let element = element.unwrap();
        let s = element.column(0).as_primitive::<Float32Type>().value(0);
        let m = element.column(1).as_primitive::<Float32Type>().value(0);
        let n = element.column(2).as_fixed_size_list().value(0);
        rows.push((s, m, n.as_primitive::<Float32Type>().values().to_vec()));
    }
    // Mean 3r + 1 > 4 keeps r >= 2.
    let want: Vec<(f32, f32, Vec<f32>)> = (2..10)
        .map(|r| {
            let t = [3.0 * r as f32, 3.0 * r as f32 + 1.0, 3.0 * r as f32 + 2.0];
            let s: f32 = t.iter().sum();
            (s, t[2] * (r as f32 + 1.0) - t[0], t.iter().map(|v| v / s).collect())
        })
        .collect();
    assert_eq!(rows, want);
    // A filter takes scalars only.
    let err = Dataset::from_batches(vec![chunk]).unwrap().filter(col("t").gt(lit(1.0))).unwrap_err();
    assert!(err.to_string().contains("tensor"), "{err}");
}

#[test]
fn maps_compute_one_hot_hash_buckets_axis_reductions_and_normalize() {
    use arrow::array::{Array, AsArray, FixedSizeListArray, Float32Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Float32Type, Int64Type};

    // 12 elements: idx = r % 6 - 1 (from -1 to 4: two out of range for depth 4), a word, and
    // t: float32[2, 3] with t[i][j] = (6r + 3i + j) / 2 - 4.
    let words = ["hello", "", "héllo wörld"];
    // tf.strings.to_hash_bucket_fast(words, 1000) in TensorFlow 2.21.
    let buckets = [296i64, 263, 627];
    let value = |r: usize, i: usize, j: usize| (6 * r + 3 * i + j) as f32 / 2.0 - 4.0;
    let flat: Vec<f32> = (0..12).flat_map(|r| (0..2).flat_map(move |i| (0..3).map(move |j| value(r, i, j)))).collect();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let rows = FixedSizeListArray::new(item, 3, Arc::new(Float32Array::from(flat)), None);
    let item = Arc::new(Field::new("item", rows.data_type().clone(), true));
    let t = FixedSizeListArray::new(item, 2, Arc::new(rows), None);
    let chunk = arrow::record_batch::RecordBatch::try_from_iter([
        ("idx", Arc::new(Int64Array::from_iter_values((0..12).map(|r| r % 6 - 1))) as arrow::array::ArrayRef),
        ("word", Arc::new(StringArray::from_iter_values((0..12).map(|r| words[r % 3])))),
        ("t", Arc::new(t)),
    ])
    .unwrap();
    let (means, stds) = ([0.5, -1.0, 2.0], [2.0, 0.5, 4.0]);
    // A map computing all four, a map reading its tensors (the optimizer fuses the two), and a
    // filter on a reduction over every dim: max over i of sum over j is 9r - 6 > 0 for r >= 1.
    let ds = Dataset::from_batches(vec![chunk.slice(0, 5), chunk.slice(5, 7)])
        .unwrap()
        .map(MapFunction::select([
            ("oh", one_hot(col("idx"), 4)),
            ("h", hash_bucket(col("word"), 1000)),
            ("rows", reduce_sum_axes(col("t"), &[-1])),
            ("cols", reduce_max_axes(col("t"), &[0])),
            ("mean", reduce_mean_axes(col("t"), &[0, 1])),
            ("n", normalize(col("t"), &means, &stds)),
        ]))
        .unwrap()
        .map(MapFunction::with_fields([("hot", reduce_sum(col("oh") * lit(2.0)))]))
        .unwrap()
        .filter(reduce_max_axes(col("rows"), &[0]).gt(lit(0.0)))
        .unwrap();
    let spec = ds.element_spec();
    let shape = |name: &str| spec.field(name).map(|f| (f.dtype, f.shape.clone()));
    assert_eq!(shape("oh"), Some((DType::Float32, vec![4])));
    assert_eq!(shape("h"), Some((DType::Int64, vec![])));
    assert_eq!(shape("rows"), Some((DType::Float32, vec![2])));
    assert_eq!(shape("cols"), Some((DType::Float32, vec![3])));
    assert_eq!(shape("mean"), Some((DType::Float32, vec![])));
    assert_eq!(shape("n"), Some((DType::Float32, vec![2, 3])));
    assert_eq!(shape("hot"), Some((DType::Float32, vec![])));

    type Row = (Vec<f32>, i64, Vec<f32>, Vec<f32>, f32, Vec<f32>, f32);
    let values = |element: &arrow::record_batch::RecordBatch, name: &str| -> Vec<f32> {
        let mut column = element.column_by_name(name).unwrap().clone();
        while let DataType::FixedSizeList(_, n) = column.data_type() {
            let list = column.as_fixed_size_list().clone();
            column = list.values().slice(0, list.len() * *n as usize);
        }
        column.as_primitive::<Float32Type>().values().to_vec()
    };
    let collect = |ds: &Dataset| -> Vec<Row> {
        let mut got = vec![];
        for element in ds.iter() {
            let element = element.unwrap();
            let h = element.column_by_name("h").unwrap().as_primitive::<Int64Type>().value(0);
            got.push((
                values(&element, "oh"),
                h,
                values(&element, "rows"),
                values(&element, "cols"),
                values(&element, "mean")[0],
                values(&element, "n"),
                values(&element, "hot")[0],
            ));
        }
        got
    };
    let want: Vec<Row> = (1..12)
        .map(|r| {
            let idx = r as i64 % 6 - 1;
            let oh: Vec<f32> = (0..4).map(|d| if d == idx { 1.0 } else { 0.0 }).collect();
            let rows: Vec<f32> = (0..2).map(|i| (0..3).map(|j| value(r, i, j)).sum()).collect();
            let cols: Vec<f32> = (0..3).map(|j| value(r, 0, j).max(value(r, 1, j))).collect();
            let mean = rows.iter().sum::<f32>() / 6.0;
            let n: Vec<f32> =
                (0..2).flat_map(|i| (0..3).map(move |j| (value(r, i, j) - means[j] as f32) / stds[j] as f32)).collect();
            let hot = if (0..4).contains(&idx) { 2.0 } else { 0.0 };
            (oh, buckets[r % 3], rows, cols, mean, n, hot)
        })
        .collect();
    assert_eq!(collect(&ds), want);
    // The same, element by element, without the optimizer.
    assert_eq!(collect(&ds.with_options(Options::default().without_optimizations())), want);
}

/// A chunk of `rows` elements with float32 tensor fields of the given shapes, field `name`'s
/// value at row `r` and flat index `i` being `fill(name, r, i)`.
fn tensor_fields(
    rows: usize,
    fields: &[(&str, &[usize])],
    fill: impl Fn(&str, usize, usize) -> f32,
) -> arrow::record_batch::RecordBatch {
    use arrow::array::{ArrayRef, FixedSizeListArray, Float32Array};
    use arrow::datatypes::Field;
    let columns: Vec<(&str, ArrayRef)> = fields
        .iter()
        .map(|(name, shape)| {
            let width: usize = shape.iter().product();
            let values: Vec<f32> =
                (0..rows).flat_map(|r| (0..width).map(move |i| (r, i))).map(|(r, i)| fill(name, r, i)).collect();
            let mut array: ArrayRef = Arc::new(Float32Array::from(values));
            for &size in shape.iter().rev() {
                let item = Arc::new(Field::new("item", array.data_type().clone(), true));
                let len = array.len() / size;
                array = Arc::new(FixedSizeListArray::try_new_with_length(item, size as i32, array, None, len).unwrap());
            }
            (*name, array)
        })
        .collect();
    arrow::record_batch::RecordBatch::try_from_iter(columns).unwrap()
}

/// Every float32 value of field `name`, element after element, flattened.
fn flat_floats(ds: &Dataset, name: &str) -> Vec<f32> {
    use arrow::array::{Array, AsArray};
    let mut out = vec![];
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap();
        let mut column = chunk.column_by_name(name).unwrap().clone();
        while let Some(list) = column.as_fixed_size_list_opt() {
            column = list.values().slice(0, list.len() * list.value_length() as usize);
        }
        out.extend(column.as_primitive::<arrow::datatypes::Float32Type>().values().iter().copied());
    }
    out
}

#[test]
fn tensor_shapes_broadcast_as_in_numpy() {
    // b: [4, 3], c: [1], v: [3], a: [4, 1], for 6 elements, each value distinct.
    let rows = 6;
    let chunk = tensor_fields(rows, &[("b", &[4, 3]), ("c", &[1]), ("v", &[3]), ("a", &[4, 1])], |name, r, i| {
        let base = match name {
            "b" => 0.0,
            "c" => 1000.0,
            "v" => 2000.0,
            _ => 3000.0,
        };
        base + (r * 100 + i) as f32
    });
    let value = |name: &str, r: usize, i: usize| match name {
        "b" => (r * 100 + i) as f32,
        "c" => 1000.0 + (r * 100) as f32,
        "v" => 2000.0 + (r * 100 + i) as f32,
        _ => 3000.0 + (r * 100 + i) as f32,
    };
    for options in [Options::default(), Options::default().without_optimizations()] {
        let ds = Dataset::from_batches(vec![chunk.slice(0, 4), chunk.slice(4, 2)])
            .unwrap()
            .with_options(options)
            .map(MapFunction::select([
                ("bc", col("b") * col("c")),
                ("bv", col("b") - col("v")),
                ("av", col("a") + col("v")),
                ("cv", col("c") * col("v") + lit(1.0)),
            ]))
            .unwrap();
        let spec = ds.element_spec();
        let shape = |f: &str| spec.field(f).unwrap().shape.clone();
        assert_eq!((shape("bc"), shape("bv"), shape("av"), shape("cv")), (vec![4, 3], vec![4, 3], vec![4, 3], vec![3]));
        let (mut bc, mut bv, mut av, mut cv) = (vec![], vec![], vec![], vec![]);
        for r in 0..rows {
            for i in 0..4 {
                for j in 0..3 {
                    bc.push(value("b", r, 3 * i + j) * value("c", r, 0));
                    bv.push(value("b", r, 3 * i + j) - value("v", r, j));
                    av.push(value("a", r, i) + value("v", r, j));
                }
            }
            for j in 0..3 {
                cv.push(value("c", r, 0) * value("v", r, j) + 1.0);
            }
        }
        assert_eq!(flat_floats(&ds, "bc"), bc);
        assert_eq!(flat_floats(&ds, "bv"), bv);
        assert_eq!(flat_floats(&ds, "av"), av);
        assert_eq!(flat_floats(&ds, "cv"), cv);
        // Reductions over a broadcast expression see every broadcast value.
        let sums = ds.map(MapFunction::select([("s", reduce_sum(col("av")))])).unwrap();
        let want: Vec<f32> = av.chunks(12).map(|t| t.iter().sum()).collect();
        assert_eq!(flat_floats(&sums, "s"), want);
    }
    // Shapes that do not broadcast are a type error naming both fields.
    let bad = tensor_fields(2, &[("p", &[4, 3]), ("q", &[4])], |_, r, i| (r + i) as f32);
    let err =
        Dataset::from_batches(vec![bad]).unwrap().map(MapFunction::select([("x", col("p") + col("q"))])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("'p' [4, 3]") && msg.contains("'q' [4]") && msg.contains("do not broadcast"), "{msg}");
}

#[test]
fn a_map_selecting_fields_passes_variable_length_fields_through() {
    use arrow::array::AsArray;
    let rows = vec![vec![1, 2, 3], vec![], vec![4, 5], vec![6]];
    let ds = Dataset::from_batches(vec![ragged_batch("tokens", rows.clone())]).unwrap();
    let spec = ds.element_spec().field("tokens").unwrap().clone();
    for options in [Options::default(), Options::default().without_optimizations()] {
        let selected = ds
            .with_options(options)
            .map(MapFunction::select([("ids", col("tokens")), ("n", length(col("tokens")))]))
            .unwrap();
        let ids = selected.element_spec().field("ids").unwrap().clone();
        assert_eq!((ids.dtype, ids.shape.clone(), ids.kind), (spec.dtype, spec.shape.clone(), spec.kind));
        let (mut got, mut lengths) = (vec![], vec![]);
        for element in selected.iter() {
            let element = element.unwrap();
            let list = element.column_by_name("ids").unwrap().as_list::<i32>().value(0);
            got.push(list.as_primitive::<arrow::datatypes::Int64Type>().values().to_vec());
            lengths.extend(column_i64(&element, "n"));
        }
        assert_eq!(got, rows);
        assert_eq!(lengths, rows.iter().map(|r| r.len() as i64).collect::<Vec<_>>());
        // Later operators see the same field: padded_batch pads it.
        let padded = selected.padded_batch(2, PaddedBatchOptions::default()).unwrap();
        let first = padded.iter().next().unwrap().unwrap();
        let ids = first.column_by_name("ids").unwrap();
        assert_eq!(ids.len(), 2, "{ids:?}");
    }
}

//! The parallel runtime: parallel operators give the sequential results (in order, or the
//! same elements when unordered), errors and panics in workers arrive in order as errors,
//! buffers stay within their bounds, and the tuner's choices are visible in
//! `explain analyze`. Checkpoints of these operators are covered in `tests/checkpoint.rs`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::Float32Array;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use common::*;
use flumen::prelude::*;
use flumen::{Error, Options};

fn range(a: i64, b: i64) -> Dataset {
    Dataset::range(a, b).unwrap()
}

fn spec(name: &str) -> ElementSpec {
    ElementSpec::new(vec![FieldSpec::scalar(name, DType::Int64)]).unwrap()
}

fn calls(n: u32, deterministic: Option<bool>) -> Parallel {
    Parallel { num_parallel_calls: Tunable::Fixed(n), deterministic }
}

fn autotuned() -> Parallel {
    Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None }
}

/// A per-element closure computing `value * 3`, failing on multiples of 17 and panicking on
/// 100 when `panics`.
fn triple(panics: bool) -> MapFunction {
    MapFunction::element(None, spec("value"), move |row| {
        let v = column_i64(row, "value")[0];
        if panics && v == 100 {
            panic!("boom at {v}");
        }
        if v % 17 == 0 && v > 0 {
            return Err(Error::execution("triple", format!("{v} is a multiple of 17")));
        }
        Ok(int_batch("value", vec![v * 3]))
    })
}

/// Sequential runs of `ds` (optimizer off, so nothing is parallel) against parallel ones.
fn sequential(ds: &Dataset) -> Dataset {
    ds.with_options(Options::default().without_optimizations().with_autotune(false))
}

#[test]
fn parallel_maps_give_the_sequential_sequence_with_errors_in_place() {
    for chunk_rows in [1, 7, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        for parallel in [calls(2, None), calls(4, Some(true)), autotuned()] {
            let closure = range(0, 300).map_with(triple(false), parallel).unwrap().with_options(options.clone());
            let expected = item_texts(&sequential(&closure), "value");
            assert!(expected.iter().any(|i| i.starts_with("Err")), "the closure fails on some elements");
            assert_eq!(item_texts(&closure, "value"), expected, "closure map, {parallel:?}, chunks of {chunk_rows}");

            let exprs = MapFunction::with_fields([("y", lit(1000i64) / (col("value") % lit(50i64)))]);
            let expr = range(0, 300).map_with(exprs, parallel).unwrap().with_options(options.clone());
            let expected = item_texts(&sequential(&expr), "y");
            assert_eq!(item_texts(&expr, "y"), expected, "expression map, {parallel:?}, chunks of {chunk_rows}");
        }
    }
}

/// A per-element predicate keeping odd values, failing on multiples of 13 and panicking on
/// 150 when `panics`.
fn odd(panics: bool) -> PredicateFunction {
    PredicateFunction::element(None, move |row| {
        let v = column_i64(row, "value")[0];
        if panics && v == 150 {
            panic!("boom at {v}");
        }
        if v % 13 == 0 && v > 0 {
            return Err(Error::execution("odd", format!("{v} is a multiple of 13")));
        }
        Ok(v % 2 == 1)
    })
}

#[test]
fn parallel_filters_give_the_sequential_sequence_with_errors_in_place() {
    for chunk_rows in [1, 7, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        for parallel in [calls(2, None), calls(4, Some(true)), autotuned()] {
            let closure = range(0, 300).filter_with(odd(false), parallel).unwrap().with_options(options.clone());
            let expected = item_texts(&sequential(&closure), "value");
            assert!(expected.iter().any(|i| i.starts_with("Err")), "the predicate fails on some elements");
            assert_eq!(item_texts(&closure, "value"), expected, "closure filter, {parallel:?}, chunks of {chunk_rows}");

            let predicate = (lit(1000i64) / (col("value") % lit(50i64))).gt(lit(30i64));
            let expr = range(0, 300).filter_with(predicate, parallel).unwrap().with_options(options.clone());
            let expected = item_texts(&sequential(&expr), "value");
            assert!(expected.iter().any(|i| i.starts_with("Err")), "division by zero fails on some elements");
            assert_eq!(item_texts(&expr, "value"), expected, "expression filter, {parallel:?}, chunks of {chunk_rows}");
        }
    }
    let panicking = range(0, 200).filter_with(odd(true), calls(3, None)).unwrap();
    let out = item_texts(&panicking.with_options(Options::default().with_chunk_rows(10)), "value");
    let panic = out.iter().position(|i| i.contains("panicked")).expect("the panic is an error");
    assert!(out[panic + 1..].iter().any(|i| i.contains("199")), "the filter goes on after the panic: {out:?}");
}

#[test]
fn unordered_maps_give_the_same_elements() {
    let ds = range(0, 500).map_with(triple(false), calls(4, Some(false))).unwrap();
    let mut got = item_texts(&ds, "value");
    let mut expected = item_texts(&sequential(&ds), "value");
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn a_panic_on_a_worker_is_an_error_in_order() {
    let ds = range(0, 200).map_with(triple(true), calls(4, None)).unwrap().with_options(Options::default());
    let got = item_texts(&ds, "value");
    let at = got.iter().position(|i| i.contains("boom at 100")).expect("the panic is reported");
    // Every value gives one item (an element or an error), so value 100's is item 100; the
    // iterator goes on after it.
    assert_eq!(at, 100);
    assert_eq!(got.len(), 200);
    assert_eq!(got[101], "[303]");
}

#[test]
fn parallel_batches_and_map_and_batch_give_the_sequential_batches() {
    for chunk_rows in [3, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        let mapped = range(0, 250).map_with(triple(false), calls(3, None)).unwrap();
        // map then batch: the optimizer fuses them into a parallel map_and_batch.
        let fused = mapped.batch(8).unwrap().with_options(options.clone());
        assert!(fused.explain().contains("MapAndBatchOp"), "{}", fused.explain());
        assert_eq!(item_texts(&fused, "value"), item_texts(&sequential(&fused), "value"));
        let batched = range(0, 250).batch_parallel(16, false, calls(3, None)).unwrap().with_options(options.clone());
        assert_eq!(item_texts(&batched, "value"), item_texts(&sequential(&batched), "value"));
        // Unordered: the same batches (each of consecutive elements), in any order.
        let unordered = range(0, 250).batch_parallel(16, false, calls(3, Some(false))).unwrap().with_options(options);
        let (mut got, mut expected) = (item_texts(&unordered, "value"), item_texts(&sequential(&unordered), "value"));
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "unordered batches, chunks of {chunk_rows}");
    }
}

#[test]
fn map_and_batch_maps_the_elements_that_are_there_before_its_batch_is_whole() {
    // tf.data's map_and_batch starts each element's call once its input is there. Tasks of a
    // whole batch waited for the batch's last input first: over a slow input, a batch's
    // calls all ran after its reads.
    let (gate, _arrivals) = Gate::new();
    let stall = gate.clone();
    let source = Dataset::from_generator(Some("stalls"), spec("value"), move || {
        let stall = stall.clone();
        Box::new((0..10).map(move |i| {
            if i == 3 {
                stall.wait();
            }
            Ok(int_batch("value", vec![i]))
        }))
    })
    .unwrap();
    let (called, calls_made) = std::sync::mpsc::channel();
    let f = MapFunction::element(Some("seen"), spec("value"), move |row| {
        let _ = called.send(());
        Ok(row.clone())
    });
    let ds = source
        .map_with(f, calls(2, Some(true)))
        .unwrap()
        .batch(10)
        .unwrap()
        .with_options(Options::default().with_chunk_rows(1));
    assert!(ds.explain().contains("MapAndBatchOp"), "{}", ds.explain());
    let run = ds.clone();
    let consumer = std::thread::spawn(move || item_texts(&run, "value"));
    for k in 0..3 {
        // Bounded only so that a batch-sized task fails the test instead of hanging it.
        let seen = calls_made.recv_timeout(std::time::Duration::from_secs(60));
        if seen.is_err() {
            gate.open();
            panic!("only {k} of the 3 elements there were mapped while the input waited");
        }
    }
    gate.open();
    assert_eq!(consumer.join().unwrap(), item_texts(&sequential(&ds), "value"));
}

/// Four "files" of 50 elements each, read by closures.
fn files() -> Dataset {
    range(0, 4)
        .interleave_with(
            DatasetFunction::closure(Some("file"), spec("value"), |row| {
                let f = column_i64(row, "value")[0];
                Dataset::range(f * 1000, f * 1000 + 50)?
                    .map(MapFunction::with_fields([("value", lit(10i64) / (col("value") % lit(7i64)))]))
            }),
            Tunable::Fixed(3),
            2,
            calls(3, None),
        )
        .unwrap()
}

#[test]
fn parallel_interleave_keeps_the_deterministic_order() {
    for chunk_rows in [1, 1000] {
        let ds = files().with_options(Options::default().with_chunk_rows(chunk_rows));
        assert!(ds.explain().contains("read ahead by its own producer"), "{}", ds.explain());
        assert_eq!(item_texts(&ds, "value"), item_texts(&sequential(&ds), "value"));
    }
    let sloppy = files().with_options(Options::default().with_deterministic(false));
    let (mut got, mut expected) = (item_texts(&sloppy, "value"), item_texts(&sequential(&sloppy), "value"));
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

/// `range(0, 9)` with an error in place of element 4 (`10 / (v - 4)` is its divisor), each
/// element opened as a one-element dataset, counting the opens.
fn one_element_files(opens: Arc<AtomicUsize>, parallel: Parallel) -> Dataset {
    let elements = range(0, 9).map(MapFunction::with_fields([("d", lit(10i64) / (col("value") - lit(4i64)))])).unwrap();
    let open = DatasetFunction::closure(Some("one_element"), spec("value"), move |row| {
        opens.fetch_add(1, Ordering::SeqCst);
        Dataset::from_batches(vec![int_batch("value", vec![column_i64(row, "value")[0] * 10])])
    });
    elements.interleave_with(open, Tunable::Fixed(3), 1, parallel).unwrap()
}

#[test]
fn a_parallel_interleave_keeps_errors_in_place() {
    // Its inputs are opened ahead by their producers (see
    // `an_input_slow_to_open_holds_back_only_what_must_come_from_it`); the order is the
    // sequential interleave's, errors included.
    for chunk_rows in [1, 4, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        let parallel = one_element_files(Arc::new(AtomicUsize::new(0)), calls(3, Some(true))).with_options(options);
        let expected = item_texts(&sequential(&parallel), "value");
        assert!(expected.iter().any(|i| i.starts_with("Err")), "element 4 fails: {expected:?}");
        assert_eq!(item_texts(&parallel, "value"), expected, "chunks of {chunk_rows}");
    }
}

/// A generator of `n` one-row chunks counting what it produced.
fn counted(n: i64, produced: Arc<AtomicUsize>) -> Dataset {
    Dataset::from_generator(None, spec("value"), move || {
        let produced = produced.clone();
        Box::new((0..n).map(move |v| {
            produced.fetch_add(1, Ordering::SeqCst);
            Ok(int_batch("value", vec![v]))
        }))
    })
    .unwrap()
}

#[test]
fn prefetch_reads_ahead_no_more_than_its_buffer() {
    let produced = Arc::new(AtomicUsize::new(0));
    let ds = counted(1_000_000, produced.clone())
        .prefetch(Tunable::Fixed(3))
        .unwrap()
        .with_options(Options::default().with_chunk_rows(1).without_optimizations());
    let mut it = ds.iter();
    assert_eq!(items_of(it.by_ref().take(10)), (0..10).collect::<Vec<_>>());
    // Dropping joins the producer, so the count is final: what was delivered, the buffer
    // (3 elements) and the one the producer pulled before finding it full.
    drop(it);
    let n = produced.load(Ordering::SeqCst);
    assert!((10..=14).contains(&n), "the generator produced {n} elements for 10 delivered");
}

fn items_of(it: impl Iterator<Item = Result<RecordBatch, Error>>) -> Vec<i64> {
    it.flat_map(|b| column_i64(&b.unwrap(), "value")).collect()
}

/// Elements of `kb` KiB each (a float32 tensor), from a generator.
fn large(n: usize, kb: usize) -> Dataset {
    let values = kb * 256;
    let spec = ElementSpec::new(vec![FieldSpec::tensor("x", DType::Float32, vec![values as i64])]).unwrap();
    let schema = spec.arrow_schema();
    Dataset::from_generator(None, spec, move || {
        let schema = schema.clone();
        Box::new((0..n).map(move |i| {
            let data = Float32Array::from(vec![i as f32; values]);
            let DataType::FixedSizeList(item, _) = schema.field(0).data_type() else { unreachable!("a tensor field") };
            let list = arrow::array::FixedSizeListArray::new(item.clone(), values as i32, Arc::new(data), None);
            Ok(RecordBatch::try_new(schema.clone(), vec![Arc::new(list)])?)
        }))
    })
    .unwrap()
}

#[test]
fn buffers_stay_within_the_ram_budget() {
    // 64 elements of 256 KiB behind a prefetch of 50 and a parallel map: unbounded, the
    // buffers would hold several MiB; the budget is 1 MiB.
    let budget = 1 << 20;
    let x_spec = large(1, 256).element_spec().clone();
    let ds = large(64, 256)
        .map_with(MapFunction::element(None, x_spec, |row| Ok(row.clone())), calls(2, None))
        .unwrap()
        .prefetch(Tunable::Fixed(50))
        .unwrap()
        .with_options(Options::default().with_chunk_rows(1).with_ram_budget(budget));
    let mut it = ds.iter_chunks();
    let rows: usize = it.by_ref().map(|c| c.unwrap().num_rows()).sum();
    assert_eq!(rows, 64);
    let analysis = it.analyze().unwrap();
    let held: f64 = analysis.split("held at most ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    // One element per producer may exceed the budget (so that each makes progress).
    assert!(held <= 1.0 + 3.0 * 0.26, "buffers held {held} MiB:\n{analysis}");
}

#[test]
fn explain_analyze_shows_operators_choices_and_the_bottleneck() {
    let ds = range(0, 2000)
        .map_with(triple(false), autotuned())
        .unwrap()
        .ignore_errors()
        .unwrap()
        .batch(10)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap()
        .with_options(Options::default().with_chunk_rows(50).with_cpu_budget(4).without_optimizations());
    let text = ds.explain_analyze().unwrap();
    assert!(text.contains("PrefetchOp(buffer autotuned)"), "{text}");
    let map_line = text.lines().find(|l| l.contains("ParallelMapOp")).expect(&text);
    // 2000 values, of which the 117 multiples of 17 fail.
    assert!(map_line.contains("rows=1883") && map_line.contains("errors=117"), "{map_line}");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    let start = format!("autotuned: {cores}@0ms");
    assert!(map_line.contains(&start), "the tuner's history starts at the cores: {map_line}");
    assert_eq!(text.matches("<- bottleneck").count(), 1, "{text}");
    let batches = text.lines().find(|l| l.contains("BatchOp(10)")).expect(&text);
    assert!(batches.contains("rows=189"), "1883 elements in batches of 10: {batches}");
}

#[test]
fn a_consumer_slower_than_the_pipeline_is_named_the_bottleneck() {
    let ds = range(0, 20).map_with(triple(false), calls(2, None)).unwrap().with_options(Options::default());
    let mut it = ds.iter();
    for item in it.by_ref() {
        let _ = item;
        // The "training step": far longer than the pipeline's microseconds per element.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let text = it.analyze().unwrap();
    assert!(text.contains("the consumer is the bottleneck"), "{text}");
    assert!(!text.contains("<- bottleneck"), "{text}");
}

#[test]
fn fixed_parameters_are_reported_as_fixed() {
    let ds = range(0, 100).map_with(triple(false), calls(3, None)).unwrap().with_options(Options::default());
    let text = ds.explain_analyze().unwrap();
    assert!(text.contains("parallelism=3 (fixed: 3@0ms)"), "{text}");
}

/// An interleave (cycle 8, block 1, 8 parallel calls) of 8 inputs of 20 elements, input `i`
/// holding `100 i .. 100 i + 20`, where input `slow` does not finish opening until the
/// consumer has received `release_after` elements (or 30 s have passed): the elements
/// received before the release, whether the open saw the release, and all the elements.
fn interleave_with_a_slow_open(slow: i64, deterministic: bool, release_after: usize) -> (Vec<i64>, bool, Vec<i64>) {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let in_time = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = in_time.clone();
    let f = DatasetFunction::closure(Some("inputs"), spec("value"), move |element| {
        let i = column_i64(element, "value")[0];
        if i == slow {
            let waited = released.lock().unwrap().recv_timeout(std::time::Duration::from_secs(30));
            flag.store(waited.is_ok(), Ordering::SeqCst);
        }
        Dataset::range(i * 100, i * 100 + 20)
    });
    let parallel = Parallel { num_parallel_calls: Tunable::Fixed(8), deterministic: Some(deterministic) };
    let ds = range(0, 8).interleave_with(f, Tunable::Fixed(8), 1, parallel).unwrap();
    let mut it = ds.iter();
    let mut before = vec![];
    while before.len() < release_after {
        before.extend(column_i64(&it.next().unwrap().unwrap(), "value"));
    }
    release.send(()).unwrap();
    let mut all = before.clone();
    all.extend(items_of(it));
    (before, in_time.load(Ordering::SeqCst), all)
}

#[test]
fn an_input_slow_to_open_holds_back_only_what_must_come_from_it() {
    // Opening input 4 took 3 s, and the first 48 elements, all from other inputs, came out
    // only after it: the interleave opened its inputs on the consumer's thread.
    let mut expected: Vec<i64> = (0..8).flat_map(|i| i * 100..i * 100 + 20).collect();
    expected.sort_unstable();
    for slow in 0..8 {
        // Without determinism, the other inputs keep flowing.
        let (before, in_time, mut all) = interleave_with_a_slow_open(slow, false, 48);
        assert!(in_time, "input {slow}: the consumer waited for its open");
        assert!(before.iter().all(|v| v / 100 != slow), "input {slow}: {before:?}");
        all.sort_unstable();
        assert_eq!(all, expected);
        // In order, the elements before the slow input's first turn come out.
        let (before, in_time, all) = interleave_with_a_slow_open(slow, true, slow as usize);
        assert!(in_time, "input {slow}, in order: the consumer waited for its open");
        assert_eq!(before, (0..slow).map(|i| i * 100).collect::<Vec<_>>());
        let in_order: Vec<i64> = (0..20).flat_map(|k| (0..8).map(move |i| i * 100 + k)).collect();
        assert_eq!(all, in_order, "input {slow}");
    }
}

/// A gate that user functions wait at until the test opens it, telling the test each time
/// one arrives.
#[derive(Clone)]
struct Gate {
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    arrived: std::sync::mpsc::Sender<()>,
}

impl Gate {
    fn new() -> (Gate, std::sync::mpsc::Receiver<()>) {
        let (arrived, arrivals) = std::sync::mpsc::channel();
        (Gate { open: Arc::default(), arrived }, arrivals)
    }

    fn wait(&self) {
        let _ = self.arrived.send(());
        let (lock, opened) = &*self.open;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }
}

/// Iterates `ds` on a thread of its own while every user function waits at `gate`, and
/// cancels it once one has arrived: what the iterator then yields (before the gate opens)
/// and what a save says.
fn cancel_while_blocked(ds: Dataset, gate: Gate, arrivals: std::sync::mpsc::Receiver<()>) -> (Vec<String>, String) {
    let mut it = ds.iter();
    let handle = it.cancel_handle();
    let (report, reports) = std::sync::mpsc::channel();
    let consumer = std::thread::spawn(move || {
        let items: Vec<String> = it.by_ref().map(|item| format!("{:?}", item.map(|c| c.num_rows()))).collect();
        let save = format!("{:?}", it.save(SaveMode::Full).map(drop));
        report.send((items, save)).unwrap();
        // Dropped here: that waits for the calls still running, until the gate opens.
    });
    arrivals.recv().unwrap();
    handle.cancel();
    // Bounded only so that a missed wake-up fails the test instead of hanging it.
    let got = reports.recv_timeout(std::time::Duration::from_secs(60));
    gate.open();
    consumer.join().unwrap();
    got.expect("the consumer was not woken by the cancel")
}

#[test]
fn cancelling_wakes_a_consumer_waiting_on_running_work_and_ends_the_iterator() {
    let blocked_map = |gate: Gate| {
        let f = MapFunction::element(Some("slow"), spec("value"), move |row| {
            gate.wait();
            Ok(row.clone())
        });
        range(0, 100).map_with(f, calls(2, None)).unwrap()
    };
    let blocked_interleave = |gate: Gate, deterministic: bool| {
        let f = DatasetFunction::closure(Some("inputs"), spec("value"), move |element| {
            gate.wait();
            let i = column_i64(element, "value")[0];
            Dataset::range(i * 100, i * 100 + 20)
        });
        let parallel = Parallel { num_parallel_calls: Tunable::Fixed(4), deterministic: Some(deterministic) };
        range(0, 8).interleave_with(f, Tunable::Fixed(4), 1, parallel).unwrap()
    };
    type Pipeline = Box<dyn Fn(Gate) -> Dataset>;
    let pipelines: Vec<(&str, Pipeline)> = vec![
        ("parallel map", Box::new(blocked_map)),
        ("prefetch over a parallel map", Box::new(move |g| blocked_map(g).prefetch(Tunable::Fixed(4)).unwrap())),
        (
            "ignore_errors over it",
            Box::new(move |g| blocked_map(g).prefetch(Tunable::Fixed(4)).unwrap().ignore_errors().unwrap()),
        ),
        ("interleave, any order", Box::new(move |g| blocked_interleave(g, false))),
        ("interleave, in order", Box::new(move |g| blocked_interleave(g, true))),
    ];
    let cancelled = format!("{:?}", Err::<usize, Error>(Error::Cancelled));
    for (name, pipeline) in pipelines {
        let (gate, arrivals) = Gate::new();
        let (items, save) = cancel_while_blocked(pipeline(gate.clone()), gate, arrivals);
        assert_eq!(items, vec![cancelled.clone()], "{name}");
        assert_eq!(save, format!("{:?}", Err::<(), Error>(Error::Cancelled)), "{name}");
    }
}

#[test]
fn a_cancelled_iterator_reports_it_once_then_ends() {
    let mut it =
        range(0, 1000).map_with(triple(false), calls(2, None)).unwrap().prefetch(Tunable::Fixed(8)).unwrap().iter();
    assert!(it.next().unwrap().is_ok());
    let handle = it.cancel_handle();
    handle.cancel();
    assert!(handle.is_cancelled());
    assert!(matches!(it.next(), Some(Err(Error::Cancelled))));
    assert!(it.next().is_none());
    assert!(it.next().is_none());
    // A handle taken before a restore still stops the restored iterator.
    let ds = range(0, 1000).map_with(triple(false), calls(2, None)).unwrap();
    let mut first = ds.iter();
    first.next().unwrap().unwrap();
    let checkpoint = first.save(SaveMode::Full).unwrap();
    let mut it = ds.iter();
    let handle = it.cancel_handle();
    it.restore(&checkpoint).unwrap();
    assert_eq!(column_i64(&it.next().unwrap().unwrap(), "value"), vec![3]);
    handle.cancel();
    assert!(matches!(it.next(), Some(Err(Error::Cancelled))));
}

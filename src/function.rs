//! The functions users pass to `map`, `filter`, `flat_map` and `interleave`.
//!
//! Expressions (`datafusion_expr::Expr`) are the preferred form: they are typed, visible to
//! the optimizer and run columnar. Rust closures are escape hatches with a declared output
//! spec and the properties the optimizer's guards need.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::record_batch::RecordBatch;
use datafusion_expr::Expr as DfExpr;
use flumen_ir::{ClosureKind, ClosureRef, ElementSpec, FileFormat, Result};
use flumen_udf::registry::{Callable, Registry};

/// A Rust closure with its declared properties, before it is registered.
#[derive(Clone)]
pub struct Closure {
    name: Option<String>,
    callable: Callable,
    kind: ClosureKind,
    deterministic: bool,
    stateless: bool,
    exclusive: bool,
}

impl Closure {
    pub(crate) fn new(name: Option<&str>, callable: Callable, kind: ClosureKind) -> Self {
        Closure {
            name: name.map(str::to_string),
            callable,
            kind,
            deterministic: true,
            stateless: true,
            exclusive: false,
        }
    }

    /// Registers the closure and returns its plan reference. A named closure must not clash
    /// with a different closure of the same name; an unnamed one gets a fresh anonymous name
    /// (such plans run but cannot be serialized).
    pub(crate) fn register(&self, registry: &mut Registry, what: &str) -> Result<ClosureRef> {
        let (name, anonymous) = match &self.name {
            Some(n) => (n.clone(), false),
            None => (registry.fresh_anonymous_name(what), true),
        };
        let mut single = Registry::default();
        single.register(name.clone(), self.callable.clone());
        registry.merge(&single)?;
        Ok(ClosureRef {
            name,
            kind: self.kind,
            deterministic: self.deterministic,
            stateless: self.stateless,
            exclusive: self.exclusive,
            anonymous,
        })
    }
}

/// The function of a `map`.
#[derive(Clone)]
pub enum MapFunction {
    /// Expressions computing named fields.
    Exprs {
        /// `(field name, expression)` pairs.
        outputs: Vec<(String, DfExpr)>,
        /// Keep the input's other fields.
        keep_input: bool,
    },
    /// A closure with its declared output spec.
    Closure(Closure, ElementSpec),
    /// `parse_example` of a bytes field (see [`MapFunction::parse_example`]).
    ParseExample {
        /// The bytes field holding the serialized records.
        field: String,
        /// The features to parse.
        features: Vec<flumen_udf::example::FeatureSpec>,
    },
}

impl MapFunction {
    /// Computes `fields` and keeps the input's other fields (an existing name is replaced in
    /// place, a new one appended).
    pub fn with_fields<S: Into<String>>(fields: impl IntoIterator<Item = (S, DfExpr)>) -> Self {
        MapFunction::Exprs { outputs: fields.into_iter().map(|(n, e)| (n.into(), e)).collect(), keep_input: true }
    }

    /// The element becomes exactly `fields`.
    pub fn select<S: Into<String>>(fields: impl IntoIterator<Item = (S, DfExpr)>) -> Self {
        MapFunction::Exprs { outputs: fields.into_iter().map(|(n, e)| (n.into(), e)).collect(), keep_input: false }
    }

    /// A closure called once per element (a one-row `RecordBatch`, or for a batched dataset
    /// the one-row batch of list columns) returning one element of spec `output`.
    pub fn element(
        name: Option<&str>,
        output: ElementSpec,
        f: impl Fn(&RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Self {
        MapFunction::Closure(Closure::new(name, Callable::Element(Arc::new(f)), ClosureKind::PerElement), output)
    }

    /// A closure called once per chunk of elements, returning as many elements, in order.
    pub fn batch(
        name: Option<&str>,
        output: ElementSpec,
        f: impl Fn(&RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Self {
        MapFunction::Closure(Closure::new(name, Callable::Batch(Arc::new(f)), ClosureKind::PerBatch), output)
    }

    /// tf.data's `parse_example`: the serialized `tf.train.Example`s in bytes field `field`
    /// parsed into one field per feature (and nothing else).
    ///
    /// A record that cannot be parsed (malformed, a required feature missing, a feature of
    /// another type or length) is an error of that element, which `ignore_errors` skips.
    /// The function is part of the plan: it serializes without a registry, explain shows its
    /// features, and the optimizer vectorizes it (a chunk's records parsed in one call),
    /// parallelizes it and fuses it with a following `batch`.
    pub fn parse_example(field: &str, features: Vec<flumen_udf::example::FeatureSpec>) -> Result<Self> {
        flumen_udf::example::output_spec(&features).map_err(|e| flumen_ir::Error::plan("parse_example", e))?;
        Ok(MapFunction::ParseExample { field: field.to_string(), features })
    }

    /// Declares the closure non-deterministic (random, time-dependent): the optimizer never
    /// fuses, reorders, vectorizes or parallelizes it; it runs as the plan says (in parallel
    /// where you ask for that), and how many elements ahead of the consumer it is called
    /// for is not fixed. A closure whose results depend on the calls before it, such as one
    /// drawing from a seeded random stream, must also be declared [`stateful`](Self::stateful).
    pub fn nondeterministic(mut self) -> Self {
        if let MapFunction::Closure(c, _) = &mut self {
            c.deterministic = false;
        }
        self
    }

    /// Declares the closure stateful: what a call returns may depend on the calls before it.
    /// flumen then calls it once per element, in element order, one call at a time, and only
    /// for the elements the pipeline asks for, whatever the chunk size, threads, autotuning
    /// or `num_parallel_calls`; nothing the optimizer or runtime adds reads ahead of it. Read
    /// ahead you write above it (a `prefetch`, a parallel operator) calls it ahead of the
    /// consumer, as in tf.data. Iterators of pipelines calling it save checkpoints only under
    /// `ExternalState::Ignore`.
    pub fn stateful(mut self) -> Self {
        if let MapFunction::Closure(c, _) = &mut self {
            c.stateless = false;
        }
        self
    }

    /// Declares that the closure's calls take a process-wide lock (a Python function holds
    /// the GIL): the optimizer then neither parallelizes it nor puts a prefetch after it, as
    /// calls on other threads would only wait for the lock and hand it over. A
    /// `num_parallel_calls` you give still runs, for functions that release the lock for
    /// their heavy part.
    pub fn exclusive(mut self) -> Self {
        if let MapFunction::Closure(c, _) = &mut self {
            c.exclusive = true;
        }
        self
    }
}

/// The predicate of `filter` and `take_while`.
#[derive(Clone)]
pub enum PredicateFunction {
    /// A boolean expression.
    Expr(DfExpr),
    /// A closure.
    Closure(Closure),
}

impl From<DfExpr> for PredicateFunction {
    fn from(e: DfExpr) -> Self {
        PredicateFunction::Expr(e)
    }
}

impl PredicateFunction {
    /// A closure deciding one element (a one-row `RecordBatch`).
    pub fn element(name: Option<&str>, f: impl Fn(&RecordBatch) -> Result<bool> + Send + Sync + 'static) -> Self {
        PredicateFunction::Closure(Closure::new(name, Callable::Predicate(Arc::new(f)), ClosureKind::PerElement))
    }

    /// A closure deciding a chunk of elements at once (one bool per row, no nulls).
    pub fn batch(name: Option<&str>, f: impl Fn(&RecordBatch) -> Result<BooleanArray> + Send + Sync + 'static) -> Self {
        PredicateFunction::Closure(Closure::new(name, Callable::BatchPredicate(Arc::new(f)), ClosureKind::PerBatch))
    }

    /// Declares the closure non-deterministic (see [`MapFunction::nondeterministic`]).
    pub fn nondeterministic(mut self) -> Self {
        if let PredicateFunction::Closure(c) = &mut self {
            c.deterministic = false;
        }
        self
    }

    /// Declares the closure stateful (see [`MapFunction::stateful`]).
    pub fn stateful(mut self) -> Self {
        if let PredicateFunction::Closure(c) = &mut self {
            c.stateless = false;
        }
        self
    }

    /// Declares that the closure's calls take a process-wide lock (see
    /// [`MapFunction::exclusive`]).
    pub fn exclusive(mut self) -> Self {
        if let PredicateFunction::Closure(c) = &mut self {
            c.exclusive = true;
        }
        self
    }
}

/// The function of `flat_map` and `interleave`: an element in, a dataset out.
#[derive(Clone)]
pub enum DatasetFunction {
    /// Read the file named by a string field.
    ReadFile {
        /// The field holding the path.
        field: String,
        /// The format, or `None` to infer it from the first file of a `list_files` input.
        format: FileRead,
    },
    /// Read the split named by the element's `file` and `row_group` fields (the elements of
    /// `Dataset::splits`); the format is resolved from the first file of that source.
    ReadSplit(FileRead),
    /// The element's leading dimension becomes elements (`Dataset.from_tensor_slices`).
    FromTensorSlices,
    /// A closure returning a dataset per element, with the declared spec of those datasets.
    Closure(Closure, ElementSpec),
}

/// How `DatasetFunction::ReadFile` reads each file.
#[derive(Clone, Debug)]
pub enum FileRead {
    /// A fully specified format.
    Format(FileFormat),
    /// CSV; the schema is inferred from the first listed file when not given.
    Csv(crate::format::CsvOptions),
    /// Parquet; the schema is read from the first listed file.
    Parquet {
        /// Columns to read (all when absent).
        columns: Option<Vec<String>>,
    },
    /// Arrow IPC files; the schema is read from the first listed file.
    IpcFile,
    /// Arrow IPC streams; the schema is read from the first listed file.
    IpcStream,
    /// Text lines.
    TextLines,
    /// TFRecord files, one element per record (field `record`, bytes).
    TfRecord(flumen_ir::RecordCompression),
    /// Avro container files, one element per record; the writer schema is read from the
    /// first listed file.
    Avro(crate::format::AvroOptions),
    /// flumen chunk files (snapshot shards, `cache_to` files); the schema is read from the
    /// first listed file.
    Chunks,
}

impl DatasetFunction {
    /// Reads the file named by `field` as described by `read`.
    pub fn read_file(field: impl Into<String>, read: FileRead) -> Self {
        DatasetFunction::ReadFile { field: field.into(), format: read }
    }

    /// A closure from one element (a one-row batch) to a dataset of spec `output`.
    pub fn closure(
        name: Option<&str>,
        output: ElementSpec,
        f: impl Fn(&RecordBatch) -> Result<crate::Dataset> + Send + Sync + 'static,
    ) -> Self {
        let factory = move |row: &RecordBatch| f(row).map(|d| (d.plan().clone(), d.registry().clone()));
        DatasetFunction::Closure(
            Closure::new(name, Callable::Dataset(Arc::new(factory)), ClosureKind::PerElement),
            output,
        )
    }

    /// Declares a closure non-deterministic (see [`MapFunction::nondeterministic`]).
    pub fn nondeterministic(mut self) -> Self {
        if let DatasetFunction::Closure(c, _) = &mut self {
            c.deterministic = false;
        }
        self
    }

    /// Declares a closure stateful: the optimizer adds nothing that reads ahead of it
    /// ([`MapFunction::stateful`]). `flat_map` calls it for one element at a time as its
    /// datasets run out; an `interleave` opens its cycle's elements ahead. Declare it so too
    /// when the datasets it returns call closures that keep state or hold caches: the plan
    /// cannot see inside them.
    pub fn stateful(mut self) -> Self {
        if let DatasetFunction::Closure(c, _) = &mut self {
            c.stateless = false;
        }
        self
    }
}

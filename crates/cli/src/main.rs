//! The `flumen` command: run and explain serialized pipelines.
//!
//! `flumen run PIPELINE.json` iterates a pipeline and reports what it delivered and how fast;
//! `--output FILE` writes the elements (Arrow IPC stream, Parquet or JSON lines) and
//! `--checksum` prints a hash of their values, so that runs can be compared; `--threads`,
//! `--ram-budget`, `--chunk-rows`, `--no-optimize` and `--rule NAME=off` set the options it
//! runs under; with `--save-every N --checkpoint FILE` it saves an iterator checkpoint every
//! N elements, and `--restore FILE` continues a run from one (in this process or a later one);
//! `flumen explain PIPELINE.json [--verbose] [--format text|json|dot]` prints the logical plan,
//! what each optimizer stage did, the optimized plan and the physical operators. Pipelines are the JSON documents
//! that `Dataset::serialize` writes (see `flumen_ir::json`); closures cannot be registered
//! from the command line, so pipelines that call Rust closures run only from Rust.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

/// The binary's allocator. A pipeline allocates a chunk's buffers in one thread and frees
/// them in another, megabytes at a time; glibc's malloc gives such memory back to the kernel
/// and faults it in again page by page, which mimalloc does not. The library leaves the
/// choice to the program that embeds it.
///
/// mimalloc is built with its `no_thp` feature: it no longer advises the kernel to back its
/// arena with transparent huge pages (`MADV_HUGEPAGE`), with which every first touch of its
/// memory zeroes (and may compact memory for) a whole 2 MiB page, slow on a virtual machine
/// whose host has taken back the guest's free memory. docs/performance-notes.md ("The
/// allocator") has the measurements behind both choices.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod gen_data;
mod image_limit;
mod limit;
mod output;
mod w3_data;
mod workload_data;
use flumen::{Checkpoint, Dataset, ExplainFormat, Registry, SaveMode};
use output::{json_line, Checksum, Output, OutputFormat};

#[derive(Parser)]
#[command(name = "flumen", version, about = "Run and explain flumen input pipelines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Iterate a pipeline and report elements, rows and throughput.
    Run {
        /// The pipeline (JSON written by `Dataset::serialize`).
        pipeline: PathBuf,
        /// Print the first N elements.
        #[arg(long, default_value_t = 0)]
        show: usize,
        /// Stop after N elements (counted from the start of the iteration, across restores).
        #[arg(long)]
        limit: Option<u64>,
        /// Save an iterator checkpoint every N elements (to --checkpoint).
        #[arg(long, requires = "checkpoint")]
        save_every: Option<u64>,
        /// Where --save-every writes checkpoints (replaced atomically each time).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// What checkpoints store: positions and seeds only (symbolic) or buffers too (full).
        #[arg(long, value_enum, default_value_t = Mode::Symbolic)]
        checkpoint_mode: Mode,
        /// Continue from a checkpoint saved by --save-every.
        #[arg(long)]
        restore: Option<PathBuf>,
        /// After the run, print `explain analyze`: per operator, what it delivered, the time
        /// spent in it, its buffers, the parallelism and buffer sizes the tuner chose (and
        /// when), and the bottleneck.
        #[arg(long)]
        analyze: bool,
        /// Write every element, as the iterator delivers it, to this file.
        #[arg(long)]
        output: Option<PathBuf>,
        /// The output's form (default: from its extension: .arrows, .parquet, .jsonl).
        #[arg(long, value_enum)]
        output_format: Option<OutputFormat>,
        /// Print a hash of the elements' values (the same for the same elements, however
        /// they were computed), to compare runs.
        #[arg(long)]
        checksum: bool,
        #[command(flatten)]
        options: OptionArgs,
    },
    /// Run a reference workload of `../shared/bench/WORKLOADS.md` once over the files under
    /// `--data` and print its JSON line (rows, seconds, checksum, peak RSS).
    Bench {
        /// Which workload.
        #[arg(value_enum)]
        workload: bench::Workload,
        /// The directory `gen_data.py` wrote (w4 reads nothing from it).
        #[arg(long)]
        data: PathBuf,
        /// Run the workload's hand-written single-purpose program instead (the limit).
        #[arg(long)]
        limit: bool,
        /// Alternate flumen and the limit this many times each, then print their medians and
        /// flumen's fraction of the limit.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// After each flumen pass, print its `explain analyze` to stderr (per operator: time,
        /// buffers, what the tuner chose, the bottleneck).
        #[arg(long)]
        analyze: bool,
    },
    /// Write the w1, w2 and w6 files of `../shared/bench/WORKLOADS.md` under a directory,
    /// without TensorFlow (same layout and distributions as gen_data.py, other draws).
    GenData {
        /// Where to write (created if missing).
        out: PathBuf,
        /// How much data.
        #[arg(long, value_enum, default_value_t = gen_data::Scale::Small)]
        scale: gen_data::Scale,
    },
    /// Print the logical plan, the optimizer's stages, the optimized and the physical plan.
    Explain {
        /// The pipeline (JSON written by `Dataset::serialize`).
        pipeline: PathBuf,
        /// Output format (dot: the optimized plan as a Graphviz graph).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Also print the plan after each optimizer stage ("unchanged" when it is).
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        options: OptionArgs,
    },
}

/// The options a pipeline runs under (`flumen::Options`), where the defaults will not do.
#[derive(clap::Args)]
struct OptionArgs {
    /// Worker threads of the iterator's pool (default: the cores).
    #[arg(long)]
    threads: Option<usize>,
    /// The most bytes buffers may hold, e.g. 256M or 2GiB (default: half the memory).
    #[arg(long, value_parser = parse_bytes)]
    ram_budget: Option<u64>,
    /// Rows per chunk the executor aims for.
    #[arg(long)]
    chunk_rows: Option<usize>,
    /// Run the plan as written: no optimizer, no stage fusion.
    #[arg(long)]
    no_optimize: bool,
    /// Switch an optimizer rule on or off, as NAME=on or NAME=off (repeatable).
    #[arg(long = "rule", value_name = "NAME=on|off")]
    rules: Vec<String>,
}

impl OptionArgs {
    /// `ds` under these options.
    fn apply(&self, ds: Dataset) -> Result<Dataset, String> {
        let mut options = ds.options().clone();
        if let Some(threads) = self.threads {
            options = options.with_threads(threads);
        }
        if let Some(bytes) = self.ram_budget {
            options = options.with_ram_budget(bytes);
        }
        if let Some(rows) = self.chunk_rows {
            options = options.with_chunk_rows(rows);
        }
        let known: Vec<String> =
            flumen::crates::optimizer::rule_names().into_iter().flat_map(|(_, names)| names).collect();
        for rule in &self.rules {
            let (name, on) = match rule.split_once('=') {
                Some((name, "on")) => (name, true),
                Some((name, "off")) => (name, false),
                _ => return Err(format!("--rule {rule}: expected NAME=on or NAME=off")),
            };
            if !known.iter().any(|k| k == name) {
                return Err(format!("--rule {rule}: no rule named {name} (rules: {})", known.join(", ")));
            }
            options = options.with_optimization_rule(name, on);
        }
        if self.no_optimize {
            options = options.without_optimizations();
        }
        Ok(ds.with_options(options))
    }
}

/// A number of bytes: digits, then optionally K, M, G or T (powers of 1,024, with or without
/// a trailing `B` or `iB`).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let value: u64 = digits.trim().parse().map_err(|_| format!("not a number of bytes: {text}"))?;
    let shift = match unit.trim_end_matches("iB").trim_end_matches('B').to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("not a unit of bytes in {text}: K, M, G or T")),
    };
    value.checked_mul(1 << shift).ok_or_else(|| format!("too many bytes: {text}"))
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    Symbolic,
    Full,
}

/// How `run` checkpoints: every `every` elements to `path`, in `mode`.
struct Saving<'a> {
    every: u64,
    path: &'a PathBuf,
    mode: SaveMode,
}

/// Writes `checkpoint` to `path` through a synced temporary file and a rename, so a crash
/// (or a full disk) while writing leaves the previous checkpoint intact; a failed write
/// removes its temporary file.
fn write_checkpoint(it: &flumen::DatasetIterator, saving: &Saving) -> Result<(), String> {
    let bytes = it.save(saving.mode).and_then(|c| c.to_bytes()).map_err(|e| e.to_string())?;
    let tmp = saving.path.with_extension("tmp");
    let written = std::fs::File::create(&tmp).and_then(|mut file| {
        file.write_all(&bytes)?;
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", tmp.display()));
    }
    std::fs::rename(&tmp, saving.path).map_err(|e| format!("cannot write {}: {e}", saving.path.display()))?;
    eprintln!("checkpoint after {} elements: {} ({} bytes)", it.position(), saving.path.display(), bytes.len());
    Ok(())
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Dot,
}

fn load(path: &PathBuf) -> Result<Dataset, String> {
    let json = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Dataset::deserialize(&json, Registry::default()).map_err(|e| format!("{}: {e}", path.display()))
}

/// What `run` does besides iterating.
struct Effects<'a> {
    show: usize,
    limit: Option<u64>,
    saving: Option<Saving<'a>>,
    restore: Option<&'a PathBuf>,
    analyze: bool,
    output: Option<(&'a PathBuf, OutputFormat)>,
    checksum: bool,
}

fn run(pipeline: &PathBuf, options: &OptionArgs, effects: Effects) -> Result<(), String> {
    let Effects { show, limit, saving, restore, analyze, output, checksum } = effects;
    let ds = options.apply(load(pipeline)?)?;
    let batched = ds.element_spec().batch_dims > 0;
    // An element comes as the rows of its batch: the schema of the element spec less one
    // batch dimension.
    let delivered = match batched {
        true => ds.element_spec().unbatched("output").map_err(|e| e.to_string())?.arrow_schema(),
        false => ds.element_spec().arrow_schema(),
    };
    let mut sink = match output {
        Some((path, format)) => Some((Output::create(path, format, &delivered)?, path)),
        None => None,
    };
    let mut hash = Checksum::default();
    let progress = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut last_report = start;
    let mut it = ds.iter();
    if let Some(path) = restore {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let checkpoint = Checkpoint::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        it.restore(&checkpoint).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("restored {} at element {}", path.display(), it.position());
    }
    let (mut elements, mut rows) = (it.position(), 0u64);
    let first = elements;
    while limit.is_none_or(|l| elements < l) {
        let Some(element) = it.next() else { break };
        let element = match element {
            Ok(element) => element,
            Err(e) => {
                // The output is not published: a failed run leaves no file that looks
                // complete, and what the path held before stays.
                return Err(match sink {
                    Some((_, path)) => format!("{e} ({} was not written)", path.display()),
                    None => e.to_string(),
                });
            }
        };
        if ((elements - first) as usize) < show {
            let text = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&element))
                .map_err(|e| e.to_string())?;
            println!("element {elements}:\n{text}");
        }
        // The JSON line only where something reads it: it costs more than the other outputs.
        let wants_line = checksum || sink.as_ref().is_some_and(|(sink, _)| sink.writes_lines());
        let line = if wants_line { Some(json_line(&element, batched)?) } else { None };
        if let Some((sink, path)) = &mut sink {
            sink.write(&element, line.as_deref()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        if let (true, Some(line)) = (checksum, &line) {
            hash.add(line);
        }
        elements += 1;
        // An element is delivered as a batch of its rows: one row, or b rows when batched.
        rows += element.num_rows() as u64;
        if progress && last_report.elapsed() > Duration::from_millis(200) {
            last_report = Instant::now();
            let secs = start.elapsed().as_secs_f64();
            eprint!("\r{elements} elements, {rows} rows, {:.0} rows/s, {secs:.1}s", rows as f64 / secs);
            let _ = std::io::stderr().flush();
        }
        if let Some(saving) = &saving {
            if elements % saving.every == 0 {
                write_checkpoint(&it, saving)?;
            }
        }
    }
    if progress {
        eprint!("\r\x1b[2K");
    }
    let secs = start.elapsed().as_secs_f64();
    let per_s = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
    let unit = if batched { "batches" } else { "elements" };
    let elements = elements - first;
    println!("{elements} {unit}, {rows} rows in {secs:.3}s ({per_s:.0} rows/s)");
    if let Some((sink, path)) = sink {
        sink.finish(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if checksum {
        println!("checksum {}", hash.hex());
    }
    if analyze {
        print!("{}", it.analyze().map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn explain(pipeline: &PathBuf, format: Format, verbose: bool, options: &OptionArgs) -> Result<(), String> {
    let ds = options.apply(load(pipeline)?)?;
    let format = match format {
        Format::Text => ExplainFormat::Text,
        Format::Json => ExplainFormat::Json,
        Format::Dot => ExplainFormat::Dot,
    };
    print!("{}", ds.explain_with(format, verbose).map_err(|e| format!("{}: {e}", pipeline.display()))?);
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run {
            pipeline,
            show,
            limit,
            save_every,
            checkpoint,
            checkpoint_mode,
            restore,
            analyze,
            output,
            output_format,
            checksum,
            options,
        } => {
            let mode = match checkpoint_mode {
                Mode::Symbolic => SaveMode::Symbolic,
                Mode::Full => SaveMode::Full,
            };
            let saving =
                save_every.zip(checkpoint.as_ref()).map(|(every, path)| Saving { every: every.max(1), path, mode });
            let output = output
                .as_ref()
                .map(|path| Ok::<_, String>((path, output_format.map_or_else(|| OutputFormat::of(path), Ok)?)))
                .transpose();
            output.and_then(|output| {
                let effects = Effects {
                    show: *show,
                    limit: *limit,
                    saving,
                    restore: restore.as_ref(),
                    analyze: *analyze,
                    output,
                    checksum: *checksum,
                };
                run(pipeline, options, effects)
            })
        }
        Command::Explain { pipeline, format, verbose, options } => explain(pipeline, *format, *verbose, options),
        Command::Bench { workload, data, limit, rounds, analyze } => {
            bench::bench(*workload, data, *limit, *rounds, *analyze)
        }
        Command::GenData { out, scale } => gen_data::generate(out, *scale),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

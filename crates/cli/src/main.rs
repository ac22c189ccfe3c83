//! The `flumen` command: run and explain serialized pipelines.
//!
//! `flumen run PIPELINE.json` iterates a pipeline and reports what it delivered and how fast;
//! `flumen explain PIPELINE.json [--verbose] [--format text|json|dot]` prints the logical plan,
//! what each optimizer stage did, the optimized plan and the physical operators. Pipelines are the JSON documents
//! that `Dataset::serialize` writes (see `flumen_ir::json`); closures cannot be registered
//! from the command line, so pipelines that call Rust closures run only from Rust.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use flumen::{Dataset, ExplainFormat, Registry};

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
        /// Stop after N elements.
        #[arg(long)]
        limit: Option<u64>,
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
    },
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

fn run(pipeline: &PathBuf, show: usize, limit: Option<u64>) -> Result<(), String> {
    let ds = load(pipeline)?;
    let batched = ds.element_spec().batch_dims > 0;
    let progress = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut last_report = start;
    let (mut elements, mut rows) = (0u64, 0u64);
    for element in ds.iter() {
        let element = element.map_err(|e| e.to_string())?;
        if (elements as usize) < show {
            let text = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&element))
                .map_err(|e| e.to_string())?;
            println!("element {elements}:\n{text}");
        }
        elements += 1;
        // An element is delivered as a batch of its rows: one row, or b rows when batched.
        rows += element.num_rows() as u64;
        if progress && last_report.elapsed() > Duration::from_millis(200) {
            last_report = Instant::now();
            eprint!("\r{elements} elements, {rows} rows, {:.1}s", start.elapsed().as_secs_f64());
            let _ = std::io::stderr().flush();
        }
        if limit.is_some_and(|l| elements >= l) {
            break;
        }
    }
    if progress {
        eprint!("\r\x1b[2K");
    }
    let secs = start.elapsed().as_secs_f64();
    let per_s = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
    let unit = if batched { "batches" } else { "elements" };
    println!("{elements} {unit}, {rows} rows in {secs:.3}s ({per_s:.0} rows/s)");
    Ok(())
}

fn explain(pipeline: &PathBuf, format: Format, verbose: bool) -> Result<(), String> {
    let ds = load(pipeline)?;
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
        Command::Run { pipeline, show, limit } => run(pipeline, *show, *limit),
        Command::Explain { pipeline, format, verbose } => explain(pipeline, *format, *verbose),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

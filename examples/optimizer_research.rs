//! The optimizer's research API, end to end, on one small pipeline:
//!
//! 1. choose the rule set: stages built from the built-in rule modules
//!    ([`Optimizer::with_stages`]);
//! 2. add a rule of your own, written with [`rule`]: `take(n).take(m)` → `take(min(n, m))`
//!    (added to the `fusion` stage with [`Optimizer::with_rule`]; the term shapes patterns
//!    match are listed in `docs/optimizer-rules.md`);
//! 3. plug in a cost model of your own ([`Optimizer::with_cost`]): [`DefaultCost`] with a
//!    cheaper per-element `dispatch`, wrapped so that each call of a scalar function (sqrt,
//!    floor, ...) weighs 20 more operations than arithmetic. Under it, extraction refuses the
//!    map+filter fusions that would compute `sqrt` three times per element, which flumen's
//!    built-in optimizer (all stages, default weights; printed for comparison) accepts;
//! 4. print the report (rules fired, e-graph size, iterations and time per stage), the
//!    optimized plan, the first lines of one stage's e-graph in Graphviz DOT;
//! 5. run the dataset under it ([`Options::with_optimizer`]: `iter`, `explain` and
//!    `explain_analyze` use it) and check that it delivers what the written plan does.
//!
//! It uses nothing but `flumen`'s public API, as a crate of your own would (egg comes
//! re-exported, so rules and cost models use the optimizer's version of it).
//!
//! Run it from the repository root: `cargo run --example optimizer_research`.

use arrow::array::{Array, Float64Array};
use arrow::datatypes::DataType;
use flumen::crates::ir::Op;
use flumen::crates::optimizer::egg::Id;
use flumen::crates::optimizer::rules::{eliminate, fusion, vectorize};
use flumen::crates::optimizer::{
    optimize, rule, Cost, CostModel, DefaultCost, Graph, Node, Optimizer, OptimizerConfig, Report, Rule, Stage,
};
use flumen::prelude::*;
use flumen::Result;

/// `take(n).take(m)` is `take(min(n, m))`, where a negative count means "all". (`take`
/// counts elements, not errors, so this holds around errors too.)
fn take_fusion() -> Result<Rule> {
    rule("take-fusion", "(take ?m (take ?n ?x))", |m| {
        let (outer, inner) = (m.signed("?m")?, m.signed("?n")?);
        let count = match (inner, outer) {
            (i, o) if i < 0 => o,
            (i, o) if o < 0 => i,
            (i, o) => i.min(o),
        };
        let x = m.id("?x")?;
        // `add` type-checks the new operator over `x` and returns its class; the rule then
        // merges it with the matched class.
        m.add(Op::Take { count }, &[x])
    })
}

/// [`DefaultCost`] with scalar function calls weighing `call_weight` extra operations each,
/// and every batch smaller than `small_batch` elements one more operation per element (the
/// batch size is read from the analysis with [`flumen::crates::optimizer::Facts::integer`]).
struct WeightedCalls {
    base: DefaultCost,
    call_weight: f64,
    small_batch: i64,
}

impl CostModel for WeightedCalls {
    fn cost(&self, egraph: &Graph, node: &Node, child: &dyn Fn(Id) -> Cost) -> Cost {
        let cost = self.base.cost(egraph, node, child);
        match node {
            Node::Call(_) => Cost { total: cost.total + self.call_weight, ..cost },
            Node::Batch([size, ..]) if egraph[*size].data.integer().is_some_and(|n| n < self.small_batch) => {
                Cost { total: cost.total + cost.rows, ..cost }
            }
            _ => cost,
        }
    }
}

/// Three stages of built-in rules plus `take-fusion`, extracting under `cost`.
fn optimizer(cost: impl CostModel + 'static) -> Result<Optimizer> {
    let config = OptimizerConfig { keep_dumps: true, ..OptimizerConfig::default() };
    Ok(Optimizer::new(config)
        .with_stages(vec![
            Stage { name: "eliminate".into(), rules: eliminate::rules() },
            Stage { name: "fusion".into(), rules: fusion::rules() },
            Stage { name: "vectorize".into(), rules: vectorize::rules() },
        ])
        // A misspelled stage name is an error naming the stages there are.
        .with_rule("fusion", take_fusion()?)?
        .with_cost(cost))
}

fn print_report(report: &Report) {
    for s in &report.stages {
        let fired: Vec<String> = s.rules_fired.iter().map(|(r, n)| format!("{r} x{n}")).collect();
        println!(
            "  {:<10} {:>8.1?}  {} iteration(s), {} nodes in {} classes ({}), {}: {}",
            s.name,
            s.time,
            s.iterations,
            s.egraph_nodes,
            s.egraph_classes,
            s.stop_reason,
            // A stage where no rule fired hands its input on without costing it.
            s.cost.map_or_else(|| "not extracted".to_string(), |c| format!("cost {c:.1}")),
            if fired.is_empty() { "no rule fired".to_string() } else { fired.join(", ") }
        );
    }
    println!("  total {:.1?}", report.time);
}

/// Elements delivered and the sum of `v`.
fn run(ds: &Dataset) -> Result<(usize, f64)> {
    let (mut n, mut sum) = (0, 0.0);
    for batch in ds.iter() {
        let batch = batch?;
        n += batch.num_rows();
        let v = batch.column_by_name("v").expect("field v");
        let v = v.as_any().downcast_ref::<Float64Array>().expect("float64 v");
        sum += v.values().iter().sum::<f64>();
    }
    Ok((n, sum))
}

fn main() -> Result<()> {
    let ds = Dataset::range(0, 1_000_000)?
        .map(MapFunction::select([("v", cast(col("value"), DataType::Float64) * lit(3.0) + lit(1.0))]))?
        .map(MapFunction::select([("v", sqrt(col("v")) * lit(0.5))]))?
        .filter((floor(col("v")) % lit(3.0)).not_eq(lit(0.0)))?
        .map(MapFunction::select([("v", col("v") * col("v") + lit(1.0))]))?
        .take(5000)?
        .take(2000)?
        .batch(256)?;
    println!("== Written plan ==\n{}", ds.plan());

    let cheap_dispatch = DefaultCost { dispatch: 20.0, ..DefaultCost::default() };
    let weighted = || WeightedCalls { base: cheap_dispatch.clone(), call_weight: 20.0, small_batch: 16 };
    let report = optimizer(weighted())?.optimize(ds.plan())?;
    println!("== Stages (custom cost: dispatch 20, +20 per function call) ==");
    print_report(&report);
    println!("== Optimized plan ==\n{}", report.output);

    // flumen's own optimizer (all five stages, DefaultCost) fuses the filter into the maps
    // around it, so `sqrt` runs in the filter and twice more in the fused map.
    let builtin = optimize(ds.plan(), &OptimizerConfig::default())?;
    println!("== flumen's built-in optimizer, for comparison ==\n{}", builtin.output);

    let fusion = report.stages.iter().find(|s| s.name == "fusion").expect("a fusion stage");
    let dump = fusion.dump.as_deref().unwrap_or("");
    println!("== E-graph after stage fusion (Graphviz DOT, first 12 of {} lines) ==", dump.lines().count());
    for line in dump.lines().take(12) {
        println!("{line}");
    }

    // The dataset under the custom optimizer: explain shows its stages and take-fusion.
    let custom = ds.with_options(Options::default().with_optimizer(optimizer(weighted())?));
    println!("== explain under the custom optimizer ==\n{}", custom.explain());
    let written = run(&ds.with_options(Options::default().without_optimizations()))?;
    let optimized = run(&custom)?;
    println!(
        "== Check ==\nwritten:   {} elements, sum {:.3}\noptimized: {} elements, sum {:.3}",
        written.0, written.1, optimized.0, optimized.1
    );
    assert_eq!(written, optimized, "the optimized plan delivers other elements");
    Ok(())
}

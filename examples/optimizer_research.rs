//! The optimizer's research API, end to end, on one small pipeline:
//!
//! 1. choose the rule set: stages built from the built-in rule modules
//!    ([`Optimizer::with_stages`]);
//! 2. add a rule of your own, written with [`rule`]: `take(n).take(m)` → `take(min(n, m))`
//!    (added to the `fusion` stage with [`Optimizer::with_rule`]);
//! 3. plug in a cost model of your own ([`Optimizer::with_cost`]): [`DefaultCost`] with a
//!    cheaper per-element `dispatch`, wrapped so that each call of a scalar function (sqrt,
//!    floor, ...) weighs 20 more operations than arithmetic. Under it, extraction refuses the
//!    map+filter fusions that would compute `sqrt` three times per element, which flumen's
//!    built-in optimizer (all stages, default weights; printed for comparison) accepts;
//! 4. print the report (rules fired, e-graph size, iterations and time per stage), the
//!    optimized plan, the first lines of one stage's e-graph in Graphviz DOT, and check that
//!    the optimized plan delivers what the written one does.
//!
//! Run it from the repository root: `cargo run --example optimizer_research`.

use arrow::array::{Array, Float64Array};
use arrow::datatypes::DataType;
use egg::Id;
use flumen::crates::ir::Op;
use flumen::crates::optimizer::rules::{eliminate, fusion, vectorize};
use flumen::crates::optimizer::{
    optimize, rule, Cost, CostModel, DefaultCost, Graph, Node, Optimizer, OptimizerConfig, Report, Rule, Stage,
};
use flumen::prelude::*;
use flumen::{Plan, Registry, Result};

/// `take(n).take(m)` is `take(min(n, m))`, where a negative count means "all".
fn take_fusion() -> Rule {
    rule("take-fusion", "(take ?m (take ?n ?x))", |m| {
        let (outer, inner) = (m.signed("?m")?, m.signed("?n")?);
        let count = match (inner, outer) {
            (i, o) if i < 0 => o,
            (i, o) if o < 0 => i,
            (i, o) => i.min(o),
        };
        let x = m.id("?x");
        // `add` type-checks the new operator over `x` and returns its class; the rule then
        // merges it with the matched class.
        m.add(Op::Take { count }, &[x])
    })
}

/// [`DefaultCost`] with scalar function calls weighing `call_weight` extra operations each.
struct WeightedCalls {
    base: DefaultCost,
    call_weight: f64,
}

impl CostModel for WeightedCalls {
    fn cost(&self, egraph: &Graph, node: &Node, child: &dyn Fn(Id) -> Cost) -> Cost {
        let cost = self.base.cost(egraph, node, child);
        match node {
            Node::Call(_) => Cost { total: cost.total + self.call_weight, ..cost },
            _ => cost,
        }
    }
}

/// Three stages of built-in rules plus `take-fusion`, extracting under `cost`.
fn optimizer(cost: impl CostModel + 'static) -> Optimizer {
    let config = OptimizerConfig { keep_dumps: true, ..OptimizerConfig::default() };
    Optimizer::new(config)
        .with_stages(vec![
            Stage { name: "eliminate".into(), rules: eliminate::rules() },
            Stage { name: "fusion".into(), rules: fusion::rules() },
            Stage { name: "vectorize".into(), rules: vectorize::rules() },
        ])
        .with_rule("fusion", take_fusion())
        .with_cost(cost)
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

/// Elements delivered and the sum of `v`, running `plan` exactly as it is.
fn run(plan: &Plan, registry: &Registry) -> Result<(usize, f64)> {
    let options = Options::default().without_optimizations().with_chunk_rows(1024);
    let ds = Dataset::from_plan(plan.clone(), registry.clone()).with_options(options);
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
    let report = optimizer(WeightedCalls { base: cheap_dispatch.clone(), call_weight: 20.0 }).optimize(ds.plan())?;
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

    let written = run(ds.plan(), ds.registry())?;
    let optimized = run(&report.output, ds.registry())?;
    println!(
        "== Check ==\nwritten:   {} elements, sum {:.3}\noptimized: {} elements, sum {:.3}",
        written.0, written.1, optimized.0, optimized.1
    );
    assert_eq!(written, optimized, "the optimized plan delivers other elements");
    Ok(())
}

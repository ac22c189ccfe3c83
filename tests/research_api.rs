//! The optimizer's research API as a crate of your own uses it: only `flumen`'s public items
//! (egg comes re-exported; this crate has no egg dependency of its own). Rules and cost models
//! written here run on datasets through `Options::with_optimizer`, show in `explain`, and
//! authoring mistakes are errors rather than panics (see `docs/optimizer-rules.md`).

mod common;

use flumen::crates::ir::{Expr, Op, Predicate, UnaryOp};
use flumen::crates::optimizer::egg::Id;
use flumen::crates::optimizer::{
    default_stages, rule, Cost, CostModel, DefaultCost, Graph, Node, Optimizer, OptimizerConfig, Rule, Stage,
};
use flumen::prelude::*;
use flumen::Result;

/// `skip(n).skip(m)` is `skip(n + m)` for counts of at least 0 (sound because `skip`'s count
/// goes on across errors).
fn skip_fusion() -> Result<Rule> {
    rule("skip-fusion", "(skip ?m (skip ?n ?x))", |m| {
        let (outer, inner) = (m.signed("?m")?, m.signed("?n")?);
        (outer >= 0 && inner >= 0).then_some(())?;
        let x = m.id("?x")?;
        m.add(Op::Skip { count: inner.checked_add(outer)? }, &[x])
    })
}

fn skips(plan: &flumen::Plan) -> usize {
    usize::from(matches!(plan.op(), Op::Skip { .. })) + plan.inputs().iter().map(skips).sum::<usize>()
}

#[test]
fn a_rule_of_your_own_runs_on_datasets_and_shows_in_explain() -> Result<()> {
    let optimizer = Optimizer::new(OptimizerConfig::default()).with_rule("fusion", skip_fusion()?)?;
    let ds = Dataset::range(0, 100)?.skip(50)?.skip(40)?.with_options(Options::default().with_optimizer(optimizer));
    let explain = ds.explain();
    assert!(explain.contains("skip-fusion x1"), "{explain}");
    assert_eq!(skips(&ds.optimized_plan()?), 1, "{explain}");
    assert_eq!(common::ints(&ds, "value"), (90..100).collect::<Vec<_>>());
    assert!(ds.explain_analyze()?.contains("SkipOp(90)"));
    // The options' rule switches still apply to it.
    let off = ds.with_options(ds.options().clone().with_optimization_rule("skip-fusion", false));
    assert_eq!(skips(&off.optimized_plan()?), 2);
    let none = ds.with_options(ds.options().clone().without_optimizations());
    assert!(none.optimization_report()?.stages.is_empty());
    // flumen's default stages follow the options: no parallelize stage without autotuning.
    let untuned = ds.with_options(ds.options().clone().with_autotune(false));
    let stages: Vec<String> = untuned.optimization_report()?.stages.iter().map(|s| s.name.clone()).collect();
    assert_eq!(stages, ["eliminate", "fusion", "pushdown", "vectorize"]);
    assert!(untuned.explain().contains("skip-fusion x1"));
    Ok(())
}

#[test]
fn authoring_mistakes_are_errors_naming_what_is_wrong() -> Result<()> {
    let bad = rule("half", "(take ?m", |m| m.id("?m")).expect_err("a bad pattern is an error").to_string();
    assert!(bad.contains("half") && bad.contains("bad pattern"), "{bad}");

    let misspelled = Optimizer::new(OptimizerConfig::default()).with_rule("fusoin", skip_fusion()?);
    let message = misspelled.err().expect("no such stage").to_string();
    assert!(message.contains("fusoin") && message.contains("eliminate, fusion"), "{message}");

    let twice = Optimizer::new(OptimizerConfig::default()).with_stage(Stage { name: "fusion".into(), rules: vec![] });
    assert!(twice.is_err());

    // A variable the pattern does not bind: the optimization fails, naming rule and variable.
    let unbound = rule("unbound", "(take ?n ?x)", |m| m.id("?y"))?;
    let optimizer = Optimizer::new(OptimizerConfig::default()).with_rule("eliminate", unbound)?;
    let ds = Dataset::range(0, 10)?.take(5)?.with_options(Options::default().with_optimizer(optimizer));
    let error = ds.optimization_report().expect_err("the rule asks for ?y").to_string();
    assert!(error.contains("unbound") && error.contains("?y"), "{error}");
    assert!(ds.iter().next().expect("an item").is_err());
    Ok(())
}

/// [`DefaultCost`], with any map over whole chunks (pfor) priced out.
struct NoPfor(DefaultCost);

impl CostModel for NoPfor {
    fn cost(&self, egraph: &Graph, node: &Node, child: &dyn Fn(Id) -> Cost) -> Cost {
        let cost = self.0.cost(egraph, node, child);
        match node {
            // The analysis's typed accessors: the function's class says whether it is pfor.
            Node::Map([f, ..]) if egraph[*f].data.function().is_some_and(|(_, pfor)| pfor) => {
                Cost { total: f64::INFINITY, ..cost }
            }
            _ => cost,
        }
    }
}

fn vectorized(plan: &flumen::Plan) -> bool {
    matches!(plan.op(), Op::Map { vectorized: true, .. }) || plan.inputs().iter().any(vectorized)
}

#[test]
fn a_cost_model_of_your_own_decides_extraction() -> Result<()> {
    let ds = Dataset::range(0, 10)?.map(MapFunction::with_fields([("y", col("value") * lit(2i64))]))?;
    assert!(vectorized(&ds.optimized_plan()?), "flumen's cost model picks the pfor map");
    let optimizer = Optimizer::new(OptimizerConfig::default()).with_cost(NoPfor(DefaultCost::default()));
    let custom = ds.with_options(Options::default().with_optimizer(optimizer));
    assert!(!vectorized(&custom.optimized_plan()?), "{}", custom.explain());
    assert_eq!(common::ints(&custom, "y"), (0..10).map(|v| v * 2).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn a_rule_cycle_stops_at_a_limit_and_says_so() -> Result<()> {
    // `filter(p)` → `filter(not not p)`: every application makes a new, longer predicate.
    let grow = rule("double-negation", "(filter ?p ?c ?d ?x)", |m| {
        let (Predicate::Expr { expr }, vectorized) = m.predicate("?p")? else { return None };
        let not = |e: Expr| Expr::Unary { op: UnaryOp::Not, arg: Box::new(e) };
        let op = Op::Filter {
            predicate: Predicate::Expr { expr: not(not(expr)) },
            vectorized,
            num_parallel_calls: m.tunable("?c")?,
            deterministic: m.optional_bool("?d")?,
        };
        let x = m.id("?x")?;
        m.add(op, &[x])
    })?;
    let config = OptimizerConfig::default();
    let optimizer = Optimizer::new(config.clone()).with_stages(vec![Stage { name: "grow".into(), rules: vec![grow] }]);
    let ds = Dataset::range(0, 10)?
        .filter(col("value").gt(lit(4i64)))?
        .with_options(Options::default().with_optimizer(optimizer));
    let report = ds.optimization_report()?;
    let stage = &report.stages[0];
    assert!(stage.stop_reason.contains("limit"), "{}", stage.stop_reason);
    assert!(stage.egraph_nodes <= config.node_limit + 4 * config.match_limit, "{} nodes", stage.egraph_nodes);
    assert!(ds.explain().contains(&stage.stop_reason));
    assert_eq!(common::ints(&ds, "value"), (5..10).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn the_default_stages_are_public() {
    let names = |autotune: bool| -> Vec<String> {
        default_stages(&OptimizerConfig { autotune, ..OptimizerConfig::default() })
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    assert_eq!(names(true), ["eliminate", "fusion", "pushdown", "vectorize", "parallelize"]);
    assert_eq!(names(false), ["eliminate", "fusion", "pushdown", "vectorize"]);
}

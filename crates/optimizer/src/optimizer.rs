//! Staged optimization: each stage lowers the plan into a fresh e-graph, saturates it with
//! the stage's rules under explicit iteration, node and match limits (never a time limit, so
//! the result is the same on every machine), and extracts the cheapest plan for the next
//! stage.
//!
//! The limits are a backstop, not the way a stage ends: a plan's stages saturate in a few
//! iterations and a few hundred nodes. A rule set that keeps matching (a rule cycle) stops
//! at the first limit it meets, and the stage's report says which
//! ([`StageReport::stop_reason`]); the match limit stops it before one iteration applies
//! thousands of rewrites, which the node limit, checked between rules, cannot.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use egg::{Extractor, Rewrite, RewriteScheduler, Runner, RunnerLimits, RunnerResult, SearchMatches, StopReason};
use flumen_ir::{Error, Plan, Result};

use crate::analysis::{Graph, Notes, PlanAnalysis};
use crate::cost::{CostModel, DefaultCost, Extraction};
use crate::language::Node;
use crate::lower::lower_plan;
use crate::rules::parallelize::Parallelized;
use crate::rules::{eliminate, fusion, image, parallelize, pushdown, vectorize, Rule};
use crate::value::raise;

/// Which rules run and within which limits (tf.data's `Options().experimental_optimization`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimizerConfig {
    /// Run the optimizer at all.
    pub enabled: bool,
    /// Rules switched off by name (see [`rule_names`]).
    pub disabled: BTreeSet<String>,
    /// Autotuning is on: the parallelization stage runs.
    pub autotune: bool,
    /// At most this many saturation iterations per stage.
    pub iter_limit: usize,
    /// Stop a stage's saturation when the e-graph has this many nodes.
    pub node_limit: usize,
    /// Stop a stage's saturation when one rule matches more than this many times in one
    /// iteration (before applying any of them).
    pub match_limit: usize,
    /// Keep a Graphviz dump of each stage's final e-graph in the report.
    pub keep_dumps: bool,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            enabled: true,
            disabled: BTreeSet::new(),
            autotune: true,
            iter_limit: 16,
            node_limit: 10_000,
            match_limit: 1_000,
            keep_dumps: false,
        }
    }
}

impl OptimizerConfig {
    /// No rule runs: the plan executes exactly as written, every function per element.
    pub fn disabled() -> Self {
        OptimizerConfig { enabled: false, ..OptimizerConfig::default() }
    }

    /// This config with rule `name` switched on or off.
    pub fn with_rule(mut self, name: &str, on: bool) -> Self {
        if on {
            self.disabled.remove(name);
        } else {
            self.disabled.insert(name.to_string());
        }
        self
    }
}

/// A named group of rules saturated together.
#[derive(Clone)]
pub struct Stage {
    /// The stage's name, as explain prints it.
    pub name: String,
    /// Its rules.
    pub rules: Vec<Rule>,
}

/// The default stages, in order: `eliminate`, `fusion`, `pushdown`, `vectorize`,
/// `parallelize` (the last only when autotuning is on).
pub fn default_stages(config: &OptimizerConfig) -> Vec<Stage> {
    let on = |rule: &str| !config.disabled.contains(rule);
    let parallelized = Parallelized {
        maps: on("map-parallelization"),
        filters: on("filter-parallelization"),
        maps_and_batches: on("map-and-batch-parallelization"),
    };
    if parallelized != Parallelized::ALL {
        return build_stages(config.autotune, parallelized);
    }
    // Built once per process, and only the variant asked for: parsing and compiling the
    // rules' patterns was a tenth of optimizing a small plan, and every dataset's first
    // iterator optimizes its plan (a fresh process building both variants spent 0.29 ms).
    static BUILT: [OnceLock<Vec<Stage>>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(config.autotune)].get_or_init(|| build_stages(config.autotune, Parallelized::ALL)).clone()
}

fn build_stages(autotune: bool, parallelized: Parallelized) -> Vec<Stage> {
    // Each module's rules are parsed once; stages share them (a rule is reference-counted).
    let eliminate = eliminate::rules();
    let (batch_fusion, fusion): (Vec<Rule>, Vec<Rule>) =
        fusion::rules().into_iter().partition(|r| r.name.as_str() == "map-batch-fusion");
    let mut stages = vec![
        Stage { name: "eliminate".into(), rules: eliminate.clone() },
        Stage { name: "fusion".into(), rules: fusion.into_iter().chain(eliminate.iter().cloned()).collect() },
        Stage {
            name: "pushdown".into(),
            rules: pushdown::rules().into_iter().chain(image::rules()).chain(eliminate).collect(),
        },
        Stage { name: "vectorize".into(), rules: vectorize::rules().into_iter().chain(batch_fusion).collect() },
    ];
    if autotune {
        stages.push(Stage { name: "parallelize".into(), rules: parallelize::rules_for(parallelized) });
    }
    stages
}

/// The names of every built-in rule, by module.
pub fn rule_names() -> Vec<(&'static str, Vec<String>)> {
    let names = |rules: Vec<Rule>| rules.iter().map(|r| r.name.to_string()).collect();
    vec![
        ("eliminate", names(eliminate::rules())),
        ("fusion", names(fusion::rules())),
        ("pushdown", names(pushdown::rules())),
        ("image", names(image::rules())),
        ("vectorize", names(vectorize::rules())),
        ("parallelize", names(parallelize::rules())),
    ]
}

/// What one stage did.
#[derive(Debug, Clone)]
pub struct StageReport {
    /// The stage's name.
    pub name: String,
    /// How often each rule changed the e-graph (rules that never did are absent).
    pub rules_fired: BTreeMap<String, usize>,
    /// Saturation iterations run.
    pub iterations: usize,
    /// E-graph nodes at the end.
    pub egraph_nodes: usize,
    /// E-graph classes at the end.
    pub egraph_classes: usize,
    /// Why saturation stopped: `saturated`, or the limit it met (`iteration limit`,
    /// `node limit`, `match limit: RULE matched more than N times in one iteration`).
    pub stop_reason: String,
    /// Rewrites the stage refused (a rule that would have changed a plan's element spec;
    /// debug builds panic instead).
    pub refused: BTreeMap<String, usize>,
    /// The cost of the extracted plan; `None` where no rule changed the e-graph, whose
    /// plan is then the stage's input, not extracted (nor costed) again.
    pub cost: Option<f64>,
    /// The plan after the stage.
    pub plan: Plan,
    /// The plan differs from the stage's input.
    pub changed: bool,
    /// Wall time of the stage (lowering, saturation, extraction).
    pub time: Duration,
    /// The final e-graph in Graphviz DOT, when asked for.
    pub dump: Option<String>,
}

/// What the optimizer did to a plan.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan as written.
    pub input: Plan,
    /// One report per stage, in order.
    pub stages: Vec<StageReport>,
    /// The optimized plan.
    pub output: Plan,
    /// Total wall time.
    pub time: Duration,
}

/// An optimizer: stages of rules and a cost model. [`Optimizer::new`] gives flumen's own;
/// researchers can replace the stages, add rules and swap the cost model.
pub struct Optimizer {
    config: OptimizerConfig,
    stages: Stages,
    cost: Box<dyn CostModel>,
}

/// The stages an optimizer runs.
enum Stages {
    /// flumen's default stages as the configuration of each optimization makes them (which
    /// rules are switched off, whether autotuning adds the parallelize stage), with rules
    /// added to them and stages added after them.
    Default { rules: Vec<(String, Rule)>, after: Vec<Stage> },
    /// Stages given whole.
    Given(Vec<Stage>),
}

impl Optimizer {
    /// flumen's stages and cost model under `config`.
    pub fn new(config: OptimizerConfig) -> Optimizer {
        Optimizer {
            config,
            stages: Stages::Default { rules: Vec::new(), after: Vec::new() },
            cost: Box::new(DefaultCost::default()),
        }
    }

    /// Replaces the stages.
    pub fn with_stages(mut self, stages: Vec<Stage>) -> Optimizer {
        self.stages = Stages::Given(stages);
        self
    }

    /// Adds `rule` to the stage named `stage`; an error naming the stages there are when
    /// there is no such stage (add one with [`Optimizer::with_stage`]). A rule added to a
    /// default stage runs wherever that stage runs (`parallelize` only with autotuning on).
    pub fn with_rule(mut self, stage: &str, rule: Rule) -> Result<Optimizer> {
        let current = self.stages();
        if !current.iter().any(|s| s.name == stage) {
            let names: Vec<&str> = current.iter().map(|s| s.name.as_str()).collect();
            return Err(Error::plan(
                "optimizer",
                format!("no stage named {stage:?} to add rule {} to (stages: {})", rule.name, names.join(", ")),
            ));
        }
        match &mut self.stages {
            Stages::Default { rules, after } => match after.iter_mut().find(|s| s.name == stage) {
                Some(s) => s.rules.push(rule),
                None => rules.push((stage.to_string(), rule)),
            },
            Stages::Given(stages) => {
                stages.iter_mut().filter(|s| s.name == stage).for_each(|s| s.rules.push(rule.clone()))
            }
        }
        Ok(self)
    }

    /// Adds `stage` after the others; an error when a stage of that name exists.
    pub fn with_stage(mut self, stage: Stage) -> Result<Optimizer> {
        if self.stages().iter().any(|s| s.name == stage.name) {
            return Err(Error::plan("optimizer", format!("there is already a stage named {:?}", stage.name)));
        }
        match &mut self.stages {
            Stages::Default { after, .. } => after.push(stage),
            Stages::Given(stages) => stages.push(stage),
        }
        Ok(self)
    }

    /// Replaces the cost model extraction minimizes.
    pub fn with_cost(mut self, cost: impl CostModel + 'static) -> Optimizer {
        self.cost = Box::new(cost);
        self
    }

    /// The stages it runs under the configuration it was made with.
    pub fn stages(&self) -> Vec<Stage> {
        self.stages_under(&self.config)
    }

    /// The stages it runs under `config`: flumen's default ones are made for it.
    fn stages_under(&self, config: &OptimizerConfig) -> Vec<Stage> {
        match &self.stages {
            Stages::Given(stages) => stages.clone(),
            Stages::Default { rules, after } => {
                let mut stages = default_stages(config);
                for (name, rule) in rules {
                    stages.iter_mut().filter(|s| &s.name == name).for_each(|s| s.rules.push(rule.clone()));
                }
                stages.extend(after.iter().cloned());
                stages
            }
        }
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &OptimizerConfig {
        &self.config
    }

    /// Optimizes `plan`: the cheapest equivalent plan found, and what happened.
    pub fn optimize(&self, plan: &Plan) -> Result<Report> {
        self.optimize_with(plan, &self.config)
    }

    /// Optimizes `plan` with these stages and cost model under `config` (whether to run at
    /// all, rules switched off by name, limits, and, for flumen's default stages, whether
    /// autotuning adds the parallelize stage), as a dataset does under its options.
    pub fn optimize_with(&self, plan: &Plan, config: &OptimizerConfig) -> Result<Report> {
        let start = Instant::now();
        let mut current = plan.clone();
        let mut stages = Vec::new();
        if config.enabled {
            for stage in &self.stages_under(config) {
                let rules: Vec<&Rule> =
                    stage.rules.iter().filter(|r| !config.disabled.contains(r.name.as_str())).collect();
                let report = self.run_stage(&stage.name, &rules, &current, config)?;
                current = report.plan.clone();
                stages.push(report);
            }
        }
        Ok(Report { input: plan.clone(), stages, output: current, time: start.elapsed() })
    }

    fn run_stage(&self, name: &str, rules: &[&Rule], plan: &Plan, config: &OptimizerConfig) -> Result<StageReport> {
        let start = Instant::now();
        let mut egraph = Graph::default();
        let root = lower_plan(&mut egraph, plan);
        let sink = egraph.add(Node::Sink(root));
        let runner = Runner::default()
            .with_egraph(egraph)
            .with_scheduler(Bounded { match_limit: config.match_limit })
            .with_iter_limit(config.iter_limit)
            .with_node_limit(config.node_limit)
            // Limits are counts, never time: the same plan optimizes the same everywhere.
            .with_time_limit(Duration::from_secs(u32::MAX.into()));
        // So egg reads time only for its per-iteration timings, which no report shows. Its
        // clock (quanta's) calibrates the CPU's counter against the OS clock for about 2 ms
        // on first use in a process, so the runner reads one that stands still instead.
        let (still, _) = quanta::Clock::mock();
        let mut runner = quanta::with_clock(&still, || runner.run(rules.iter().copied()));
        let mut rules_fired = BTreeMap::new();
        for it in &runner.iterations {
            for (rule, n) in &it.applied {
                if *n > 0 {
                    *rules_fired.entry(rule.to_string()).or_insert(0) += n;
                }
            }
        }
        let Notes { spec_changes: refused, errors } = std::mem::take(&mut runner.egraph.analysis.notes);
        let egraph = &runner.egraph;
        if !errors.is_empty() {
            return Err(Error::plan("optimizer", format!("stage {name}: {}", errors.join("; "))));
        }
        // Without a union the e-graph holds the lowered plan alone, and extraction would
        // raise the same plan again (`raise(lower(plan)) == plan`, `tests/round_trip.rs`):
        // half of such a stage's time (w4's eliminate: 297 µs, 163 of them extracting and
        // raising; the whole optimizer 650–800 → 595–620 µs a pass, in process).
        let (cost, optimized, changed) = if rules_fired.is_empty() {
            (None, plan.clone(), false)
        } else {
            let extractor = Extractor::new(egraph, Extraction { egraph, model: &*self.cost });
            let (cost, best) = extractor.find_best(egraph.find(sink));
            let optimized = raise(&best)?;
            let changed = optimized != *plan;
            (Some(cost.total), optimized, changed)
        };
        let stop_reason = match &runner.stop_reason {
            Some(StopReason::Saturated) => "saturated".to_string(),
            Some(StopReason::IterationLimit(_)) => "iteration limit".to_string(),
            Some(StopReason::NodeLimit(_)) => "node limit".to_string(),
            Some(StopReason::Other(reason)) => reason.clone(),
            Some(other) => format!("{other:?}"),
            None => "not run".to_string(),
        };
        Ok(StageReport {
            name: name.to_string(),
            rules_fired,
            iterations: runner.iterations.len(),
            egraph_nodes: egraph.total_number_of_nodes(),
            egraph_classes: egraph.number_of_classes(),
            stop_reason,
            refused,
            cost,
            changed,
            plan: optimized,
            time: start.elapsed(),
            dump: config.keep_dumps.then(|| egraph.dot().to_string()),
        })
    }
}

/// egg's simple scheduler (every rule searched and applied every iteration) with a match
/// limit: an iteration in which one rule matches more than `match_limit` times stops the
/// stage before applying anything. A plan of a dozen operators gives each rule a handful of
/// matches; thousands mean a rule cycle, whose applications would grow the e-graph by
/// hundreds of thousands of nodes in one iteration.
struct Bounded {
    match_limit: usize,
}

impl RewriteScheduler<crate::language::Node, PlanAnalysis> for Bounded {
    fn search_rewrites<'a>(
        &mut self,
        iteration: usize,
        egraph: &Graph,
        rewrites: &[&'a Rewrite<crate::language::Node, PlanAnalysis>],
        limits: &RunnerLimits,
    ) -> RunnerResult<Vec<Vec<SearchMatches<'a, crate::language::Node>>>> {
        let mut all = Vec::with_capacity(rewrites.len());
        for rw in rewrites {
            let matches = rw.search_with_limit(egraph, self.match_limit.saturating_add(1));
            if matches.iter().map(|m| m.substs.len()).sum::<usize>() > self.match_limit {
                return Err(StopReason::Other(format!(
                    "match limit: {} matched more than {} times in one iteration",
                    rw.name, self.match_limit
                )));
            }
            all.push(matches);
            limits.check_limits(iteration, egraph)?;
        }
        Ok(all)
    }
}

/// Optimizes `plan` with flumen's stages and cost model under `config`.
pub fn optimize(plan: &Plan, config: &OptimizerConfig) -> Result<Report> {
    Optimizer::new(config.clone()).optimize(plan)
}

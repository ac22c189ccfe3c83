//! Chooses tunable parameter values that minimize the model's output latency within resource budgets.
//!
//! The objective is [`Model::output_latency`], the latency model of the tf.data paper, section 3.3.2.
//! Two budgets bound the search: CPU, the cores the pipeline's computing nodes keep busy at the
//! predicted output rate ([`cpu_usage`]), and RAM, the bytes that asynchronous nodes hold in their
//! buffers and in flight, counting every open copy of a node below an interleave ([`Model::copies`]).
//!
//! * [`Algorithm::HillClimb`], tf.data's default, starts every parameter at its minimum and repeatedly
//!   raises by one whichever parameter lowers the latency most, until no raise is worth it. As in
//!   tf.data, parallelism is raised only while the CPU budget is not yet reached (so the last raise
//!   may cross it), after which only buffers grow; RAM must always fit.
//! * [`Algorithm::GradientDescent`] relaxes the parameters to real numbers, follows the finite-difference
//!   gradient, projects each step back into the bounds and budgets, and finally rounds to whole values.
//!
//! Both spend a unit of a resource only where it buys at least [`MIN_GAIN`], and both are deterministic:
//! they visit tunables in node order and break ties in favour of the first.

use super::model::{Kind, Model, NodeId, Param, Tunable};
use super::Algorithm;

/// Smallest relative latency reduction for which the optimizer raises a parameter by one more unit.
///
/// Under the queueing model more parallelism or buffer always helps a little, so a tiny threshold would
/// spend the whole budget on gains far below the noise of the measured self times that feed the model.
pub const MIN_GAIN: f64 = 1e-3;

/// Upper bound on the steps either algorithm takes.
const MAX_ITERATIONS: usize = 1000;

/// Gradient descent stops once its step, in parameter units, shrinks below this.
const MIN_STEP: f64 = 1e-3;

/// Relative offset used for finite differences.
const DIFFERENCE: f64 = 1e-6;

/// How much of one resource a model's current parameters take, for a consumer period.
type Usage = fn(&Model, f64) -> f64;

/// Resource limits the optimizer must respect.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Maximum of [`cpu_usage`]: threads the optimizer may hand to nodes with tunable parallelism.
    pub cpu: f64,
    /// Maximum of [`ram_usage`], in bytes.
    pub ram_bytes: f64,
}

impl Budget {
    /// Whether `model`'s current parameters stay within both limits for a consumer asking every
    /// `consumer_period`.
    pub fn admits(&self, model: &Model, consumer_period: f64) -> bool {
        cpu_usage(model, consumer_period) <= self.cpu && ram_usage(model) <= self.ram_bytes
    }
}

/// Cores the pipeline keeps busy at the output rate the model predicts: each computing node's self
/// time per element, times its elements per output element ([`Model::visits`]), over the time
/// between outputs (the output latency, or the consumer's period when that is longer). Sources and
/// interleaves are not charged: they are taken to wait on reads rather than compute, and of a
/// node's self time only its [`cpu_share`](super::model::Node::cpu_share) is: a parallel map
/// whose calls sleep or read keeps no core busy while they wait, so its calls may outnumber
/// the cores.
///
/// What is charged is work, not threads: stages run side by side, so a pipeline of three parallel
/// maps on two cores may give each several calls as long as their summed work fits the cores, and
/// a parallelism that only adds waiting threads costs nothing.
pub fn cpu_usage(model: &Model, consumer_period: f64) -> f64 {
    let between_outputs =
        model.output_latency(consumer_period).max(if consumer_period.is_finite() { consumer_period } else { 0.0 });
    if between_outputs <= 0.0 {
        return 0.0;
    }
    let computes = |n: &super::model::Node| matches!(n.kind, Kind::Sync { .. } | Kind::Async { .. });
    let nodes = model.nodes().iter().zip(model.visits());
    let work: f64 = nodes.filter(|(n, _)| computes(n)).map(|(n, visits)| n.self_time * n.cpu_share * visits).sum();
    work / between_outputs
}

/// Bytes held by asynchronous nodes, per open copy: `buffer` finished elements plus one in flight per worker.
pub fn ram_usage(model: &Model) -> f64 {
    let nodes = model.nodes().iter().zip(model.copies());
    nodes
        .filter(|(n, _)| matches!(n.kind, Kind::Async { .. } | Kind::Interleave { .. }))
        .map(|(n, c)| (n.buffer + n.parallelism) * n.bytes_per_element * c)
        .sum()
}

/// The value chosen for one tunable parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setting {
    /// The node the parameter belongs to.
    pub node: NodeId,
    /// Which parameter.
    pub param: Param,
    /// Its value after optimization.
    pub value: f64,
}

/// What [`optimize`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Every tunable parameter with its final value, in node order.
    pub settings: Vec<Setting>,
    /// Output latency of the model as passed in.
    pub latency_before: f64,
    /// Output latency with the chosen settings.
    pub latency_after: f64,
    /// Steps taken: accepted raises for hill climbing, descent steps tried for gradient descent.
    pub iterations: usize,
}

/// Sets the tunable parameters of `model` to minimize its output latency for a consumer asking every
/// `consumer_period`, without exceeding `budget`.
///
/// The search starts from the current values, clamped into each tunable's range, and only takes steps
/// that stay within both budgets, so hill climbing leaves a start that already exceeds one as it is.
/// Gradient descent never ends at a higher latency than its start.
pub fn optimize(model: &mut Model, consumer_period: f64, budget: &Budget, algorithm: Algorithm) -> Outcome {
    let latency_before = model.output_latency(consumer_period);
    let knobs: Vec<(NodeId, Tunable)> = (model.nodes().iter().enumerate())
        .flat_map(|(i, node)| node.tunables.iter().map(move |t| (NodeId(i), *t)))
        .collect();
    let mut search = Search { model, period: consumer_period, budget, knobs };
    // Hill climbing only raises, so, as in tf.data, it starts each round from the minimum:
    // that way a round can also lower what an earlier round (or the initial value) set too
    // high. Gradient descent moves both ways and starts where the pipeline is.
    let start: Vec<f64> = (0..search.knobs.len())
        .map(|k| match algorithm {
            Algorithm::HillClimb => search.min(k),
            Algorithm::GradientDescent => search.get(k).clamp(search.min(k), search.max(k)),
        })
        .collect();
    search.set_all(&start);
    let iterations = match algorithm {
        Algorithm::HillClimb => search.hill_climb(),
        Algorithm::GradientDescent => search.gradient_descent(),
    };
    let settings = (0..search.knobs.len())
        .map(|k| Setting { node: search.knobs[k].0, param: search.knobs[k].1.param, value: search.get(k) })
        .collect();
    Outcome { settings, latency_before, latency_after: search.latency(), iterations }
}

/// The model under optimization together with its tunable parameters ("knobs"), addressed by position.
struct Search<'a> {
    model: &'a mut Model,
    period: f64,
    budget: &'a Budget,
    knobs: Vec<(NodeId, Tunable)>,
}

impl Search<'_> {
    fn latency(&self) -> f64 {
        self.model.output_latency(self.period)
    }

    fn fits(&self) -> bool {
        self.budget.admits(self.model, self.period)
    }

    /// Whether raising `param` from usage `before` to the current values is allowed. CPU
    /// follows tf.data: parallelism may be raised while the usage before the step is under
    /// the budget, so the last step may reach past it (the budget is cores, and a pipeline
    /// short of using them all should get there); once it is reached only buffers grow. RAM
    /// is a hard limit: the values must fit, or at least use no more than before.
    fn fits_from(&self, before: (f64, f64), param: Param) -> bool {
        let ram = ram_usage(self.model);
        let cpu_allows = param != Param::Parallelism || before.0 < self.budget.cpu;
        cpu_allows && (ram <= self.budget.ram_bytes || ram <= before.1)
    }

    /// The smallest latency reduction worth a step: a share of the latency, or of the
    /// consumer's period when that is longer (a pipeline already faster than its consumer
    /// gains nothing from being faster still).
    fn min_gain(&self, latency: f64) -> f64 {
        let period = if self.period.is_finite() { self.period } else { 0.0 };
        MIN_GAIN * latency.max(period)
    }

    fn min(&self, k: usize) -> f64 {
        self.knobs[k].1.min
    }

    fn max(&self, k: usize) -> f64 {
        self.knobs[k].1.max
    }

    fn get(&self, k: usize) -> f64 {
        self.model.param(self.knobs[k].0, self.knobs[k].1.param)
    }

    fn set(&mut self, k: usize, value: f64) {
        self.model.set_param(self.knobs[k].0, self.knobs[k].1.param, value);
    }

    fn set_all(&mut self, values: &[f64]) {
        for (k, value) in values.iter().enumerate() {
            self.set(k, *value);
        }
    }

    fn hill_climb(&mut self) -> usize {
        let mut latency = self.latency();
        for iteration in 0..MAX_ITERATIONS {
            let usage = (cpu_usage(self.model, self.period), ram_usage(self.model));
            let mut best: Option<(usize, f64, f64)> = None;
            for k in 0..self.knobs.len() {
                let value = self.get(k);
                let raised = (value + 1.0).min(self.max(k));
                if raised <= value {
                    continue;
                }
                self.set(k, raised);
                let candidate = self.latency();
                let to_beat = best.map_or(latency - self.min_gain(latency), |(_, _, l)| l);
                if candidate < to_beat && self.fits_from(usage, self.knobs[k].1.param) {
                    best = Some((k, raised, candidate));
                }
                self.set(k, value);
            }
            let Some((k, raised, candidate)) = best else { return iteration };
            self.set(k, raised);
            latency = candidate;
        }
        MAX_ITERATIONS
    }

    fn gradient_descent(&mut self) -> usize {
        let start: Vec<f64> = (0..self.knobs.len()).map(|k| self.get(k)).collect();
        let start_latency = self.latency();
        let (mut x, mut latency) = (start.clone(), start_latency);
        let mut step = 1.0;
        let mut iterations = 0;
        while iterations < MAX_ITERATIONS && step >= MIN_STEP {
            let Some(direction) = self.descent_direction(&x, latency) else { break };
            iterations += 1;
            let mut candidate: Vec<f64> = (x.iter().zip(&direction).enumerate())
                .map(|(k, (v, d))| (v + step * d).clamp(self.min(k), self.max(k)))
                .collect();
            self.project(&mut candidate);
            self.set_all(&candidate);
            let candidate_latency = self.latency();
            // As in hill climbing, every unit a parameter is raised by has to buy MIN_GAIN.
            let raised: f64 = candidate.iter().zip(&x).map(|(c, v)| (c - v).max(0.0)).sum();
            if candidate_latency < latency * (1.0 - MIN_GAIN * raised) && self.fits() {
                (x, latency) = (candidate, candidate_latency);
                step *= 2.0;
            } else {
                step /= 2.0;
            }
        }
        // Rounding down keeps every usage within budget, as usage only grows with each parameter; then
        // each value is rounded up instead where that still fits and helps.
        let floor: Vec<f64> = (0..x.len()).map(|k| x[k].floor().max(self.min(k))).collect();
        self.set_all(&floor);
        latency = self.latency();
        for (k, &floor) in floor.iter().enumerate() {
            let ceil = x[k].ceil().min(self.max(k));
            if ceil <= floor {
                continue;
            }
            self.set(k, ceil);
            let raised = self.latency();
            if raised < latency * (1.0 - MIN_GAIN) && self.fits() {
                latency = raised;
            } else {
                self.set(k, floor);
            }
        }
        if latency > start_latency {
            self.set_all(&start);
        }
        iterations
    }

    /// Steepest-descent direction at `x`, scaled so its largest component is 1, or `None` where no move is
    /// worth it. Along a spent budget the direction keeps to the budget's boundary, trading one parameter
    /// for another instead of stalling against it.
    fn descent_direction(&mut self, x: &[f64], latency: f64) -> Option<Vec<f64>> {
        let period = self.period;
        let mut d: Vec<f64> = self.gradient(x, |m| m.output_latency(period)).iter().map(|g| -g).collect();
        for (k, d) in d.iter_mut().enumerate() {
            // Hill climbing's rule in continuous form: raising a parameter by one unit must buy MIN_GAIN.
            let worthless = *d > 0.0 && *d < MIN_GAIN * latency;
            if !d.is_finite() || worthless || (*d > 0.0 && x[k] >= self.max(k)) || (*d < 0.0 && x[k] <= self.min(k)) {
                *d = 0.0;
            }
        }
        for (usage, limit) in self.budgets() {
            self.set_all(x);
            if usage(self.model, self.period) < limit * (1.0 - 1e-6) {
                continue;
            }
            let normal = self.normal(x, usage);
            let along: f64 = d.iter().zip(&normal).map(|(d, a)| d * a).sum();
            let norm2: f64 = normal.iter().map(|a| a * a).sum();
            if along > 0.0 && norm2 > 0.0 {
                d.iter_mut().zip(&normal).for_each(|(d, a)| *d -= along / norm2 * a);
            }
        }
        // A direction gaining less than MIN_GAIN per unit moved is only what is left of a blocked one.
        let scale = d.iter().fold(0.0, |m: f64, d| m.max(d.abs()));
        (scale > 0.0 && scale >= MIN_GAIN * latency && scale.is_finite()).then(|| d.iter().map(|d| d / scale).collect())
    }

    /// Moves `x` back inside each exceeded budget along that usage's gradient, keeping it within bounds.
    fn project(&mut self, x: &mut [f64]) {
        // Usage is linear in each parameter (cycle lengths aside, which scale what lies below them), so a
        // move along its gradient lands on the budget unless some parameter reaches its bound first. Those
        // are held at the bound and the next pass takes the remaining excess from the others. The caller
        // still checks the budgets, so an imperfect projection only costs a shorter step.
        for _ in 0..2 * (x.len() + 1) {
            self.set_all(x);
            if self.fits() {
                return;
            }
            for (usage, limit) in self.budgets() {
                let excess = usage(self.model, self.period) - limit * (1.0 - 1e-9);
                if excess <= 0.0 {
                    continue;
                }
                let normal = self.normal(x, usage);
                let norm2: f64 = normal.iter().map(|a| a * a).sum();
                if norm2 == 0.0 {
                    continue;
                }
                for (k, a) in normal.iter().enumerate() {
                    x[k] = (x[k] - excess / norm2 * a).clamp(self.min(k), self.max(k));
                }
                self.set_all(x);
            }
        }
    }

    /// Each resource's usage function paired with its limit.
    fn budgets(&self) -> [(Usage, f64); 2] {
        [(cpu_usage, self.budget.cpu), (|model, _| ram_usage(model), self.budget.ram_bytes)]
    }

    /// Gradient of `usage` at `x`, without the parameters that a move against it would push past a bound.
    fn normal(&mut self, x: &[f64], usage: Usage) -> Vec<f64> {
        let period = self.period;
        let mut normal = self.gradient(x, |model| usage(model, period));
        for (k, a) in normal.iter_mut().enumerate() {
            if (*a > 0.0 && x[k] <= self.min(k)) || (*a < 0.0 && x[k] >= self.max(k)) {
                *a = 0.0;
            }
        }
        normal
    }

    /// Forward-difference gradient of `f` at `x`, leaving the model set to `x`.
    fn gradient(&mut self, x: &[f64], f: impl Fn(&Model) -> f64) -> Vec<f64> {
        self.set_all(x);
        let at_x = f(self.model);
        let mut gradient = vec![0.0; x.len()];
        for k in 0..x.len() {
            let h = DIFFERENCE * x[k].abs().max(1.0);
            self.set(k, x[k] + h);
            gradient[k] = (f(self.model) - at_x) / h;
            self.set(k, x[k]);
        }
        gradient
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autotune::model::Node;

    const UNLIMITED: f64 = f64::INFINITY;

    fn tunable(param: Param, min: f64, max: f64) -> Tunable {
        Tunable { param, min, max }
    }

    /// The tf.data paper's Figure 5 pipeline (ms, consumer period 10) with parallelism and buffers
    /// starting at 1 and tunable: interleave and map parallelism within `1..=cpu`, buffers within
    /// `1..=32`. Elements are 1 KB, batches 10 KB. Returns the model and its interleave, map and prefetch.
    fn figure5(cpu: f64) -> (Model, NodeId, NodeId, NodeId) {
        let parallel = |kind, self_time, input, bytes| Node {
            inputs: vec![input],
            bytes_per_element: bytes,
            tunables: vec![tunable(Param::Parallelism, 1.0, cpu), tunable(Param::Buffer, 1.0, 32.0)],
            ..Node::new("parallel", kind, self_time)
        };
        let mut m = Model::new();
        let file = m.add(Node::new("from_file", Kind::Source, 5.0));
        let interleave = m.add(parallel(Kind::Interleave { cycle_length: 2.0 }, 0.0, file, 1e3));
        let map = m.add(parallel(Kind::Async { ratio: 1.0 }, 2.0, interleave, 1e3));
        let batch = m.add(Node { inputs: vec![map], ..Node::new("batch", Kind::Sync { ratio: 10.0 }, 1.0) });
        let prefetch = m.add(Node {
            inputs: vec![batch],
            bytes_per_element: 1e4,
            tunables: vec![tunable(Param::Buffer, 1.0, 32.0)],
            ..Node::new("prefetch", Kind::Async { ratio: 1.0 }, 0.0)
        });
        (m, interleave, map, prefetch)
    }

    fn run(model: &mut Model, budget: Budget, algorithm: Algorithm) -> Outcome {
        let outcome = optimize(model, 10.0, &budget, algorithm);
        // Hill climbing may take the one parallelism step that crosses the CPU budget (tested
        // on its own below); RAM is a hard limit for both.
        let fits = match algorithm {
            Algorithm::HillClimb => ram_usage(model) <= budget.ram_bytes,
            Algorithm::GradientDescent => budget.admits(model, 10.0),
        };
        assert!(fits, "{algorithm:?} broke {budget:?}: {outcome:?}");
        assert!(outcome.latency_after <= outcome.latency_before, "{algorithm:?}: {outcome:?}");
        assert_eq!(outcome.latency_after, model.output_latency(10.0));
        for s in &outcome.settings {
            assert_eq!(s.value, s.value.round(), "{s:?} is not whole");
            assert_eq!(model.param(s.node, s.param), s.value);
        }
        outcome
    }

    #[test]
    fn hill_climb_spends_cpu_on_the_map() {
        let (mut m, interleave, map, prefetch) = figure5(8.0);
        let outcome = run(&mut m, Budget { cpu: 8.0, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        assert!(outcome.latency_after < 0.7 * outcome.latency_before, "{outcome:?}");
        // The interleave's reads overlap (its threads wait, and are not charged to the CPU budget);
        // the map's compute gets the CPU.
        assert!(m.param(interleave, Param::Parallelism) > 1.0, "{outcome:?}");
        assert!(m.param(map, Param::Parallelism) > 1.0, "{outcome:?}");
        assert!(cpu_usage(&m, 10.0) <= 8.0);
        assert!(m.param(prefetch, Param::Buffer) > 1.0);
        // Buffers stop growing once another slot gains less than MIN_GAIN, well before their maximum.
        assert!(outcome.settings.iter().all(|s| s.param != Param::Buffer || s.value < 32.0), "{outcome:?}");
    }

    #[test]
    fn hill_climb_raises_parallelism_until_the_cpu_budget_is_reached() {
        // A 20 ms map behind a 1 ms source and an eager consumer: each call more keeps more of
        // the map's work going at once, so the CPU it uses grows with its parallelism.
        let model = || {
            let mut m = Model::new();
            let file = m.add(Node::new("from_file", Kind::Source, 1.0));
            let map = m.add(Node {
                inputs: vec![file],
                tunables: vec![tunable(Param::Parallelism, 1.0, 16.0)],
                ..Node::new("map", Kind::Async { ratio: 1.0 }, 20.0)
            });
            (m, map)
        };
        let (mut m, map) = model();
        optimize(&mut m, 0.0, &Budget { cpu: 2.0, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        let chosen = m.param(map, Param::Parallelism);
        assert!(cpu_usage(&m, 0.0) >= 2.0, "the climb went on until the budget was reached");
        m.set_param(map, Param::Parallelism, chosen - 1.0);
        assert!(cpu_usage(&m, 0.0) < 2.0, "and its last step started under the budget ({chosen} calls)");
        let (mut free, _) = model();
        optimize(&mut free, 0.0, &Budget { cpu: 16.0, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        assert!(free.param(map, Param::Parallelism) > chosen, "the budget binds");
    }

    #[test]
    fn hill_climb_respects_a_tight_ram_budget() {
        let (mut unlimited, ..) = figure5(8.0);
        run(&mut unlimited, Budget { cpu: 8.0, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        let (mut m, ..) = figure5(8.0);
        let start = ram_usage(&m);
        let ram_bytes = start + 25e3;
        assert!(ram_usage(&unlimited) > ram_bytes, "the budget should bind");
        run(&mut m, Budget { cpu: 8.0, ram_bytes }, Algorithm::HillClimb);
        assert!(ram_usage(&m) > start && ram_usage(&m) <= ram_bytes);
    }

    #[test]
    fn hill_climb_stops_when_the_source_is_the_bottleneck() {
        // A 20 ms source behind a 1 ms map: past a few threads the map's share of the latency is noise.
        let mut m = Model::new();
        let file = m.add(Node::new("from_file", Kind::Source, 20.0));
        let map = m.add(Node {
            inputs: vec![file],
            tunables: vec![tunable(Param::Parallelism, 1.0, 16.0)],
            ..Node::new("map", Kind::Async { ratio: 1.0 }, 1.0)
        });
        let outcome = run(&mut m, Budget { cpu: 16.0, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        let chosen = m.param(map, Param::Parallelism);
        assert!(chosen > 1.0 && chosen <= 8.0, "{outcome:?}");
        assert_eq!(outcome.iterations as f64, chosen - 1.0);
        // The climb stopped for lack of gain, not of budget: one more thread is worth less than MIN_GAIN.
        m.set_param(map, Param::Parallelism, chosen + 1.0);
        assert!(m.output_latency(10.0) > outcome.latency_after * (1.0 - MIN_GAIN));
    }

    #[test]
    fn gradient_descent_stays_within_budgets_and_improves() {
        for budget in [
            Budget { cpu: 8.0, ram_bytes: UNLIMITED },
            Budget { cpu: 2.0, ram_bytes: UNLIMITED },
            Budget { cpu: 8.0, ram_bytes: 60e3 },
            Budget { cpu: 3.0, ram_bytes: 40e3 },
        ] {
            let (mut m, _, map, _) = figure5(8.0);
            let outcome = run(&mut m, budget, Algorithm::GradientDescent);
            if budget.cpu > 2.0 {
                assert!(outcome.latency_after < 0.9 * outcome.latency_before, "{budget:?}: {outcome:?}");
                assert!(m.param(map, Param::Parallelism) > 1.0, "{budget:?}: {outcome:?}");
            }
            let (mut again, ..) = figure5(8.0);
            assert_eq!(run(&mut again, budget, Algorithm::GradientDescent), outcome, "not deterministic");
        }
    }

    #[test]
    fn an_over_budget_start_never_uses_more_of_what_it_exceeds() {
        // At its minimum the pipeline already keeps more than 0.3 cores busy: no parallelism is
        // raised, while buffers may still grow (tf.data's rule once the CPU budget is reached).
        let (mut m, interleave, map, prefetch) = figure5(8.0);
        assert!(cpu_usage(&m, 10.0) > 0.3);
        let outcome = optimize(&mut m, 10.0, &Budget { cpu: 0.3, ram_bytes: UNLIMITED }, Algorithm::HillClimb);
        assert_eq!(m.param(map, Param::Parallelism), 1.0);
        assert_eq!(m.param(interleave, Param::Parallelism), 1.0);
        assert!(m.param(prefetch, Param::Buffer) > 1.0, "{outcome:?}");
        let (mut m, ..) = figure5(8.0);
        let before = m.clone();
        let outcome = optimize(&mut m, 10.0, &Budget { cpu: 0.5, ram_bytes: 0.0 }, Algorithm::GradientDescent);
        assert!(outcome.latency_after <= outcome.latency_before);
        assert!(cpu_usage(&m, 10.0) <= cpu_usage(&before, 10.0));
    }

    #[test]
    fn values_start_inside_their_ranges() {
        let (mut m, interleave, map, _) = figure5(8.0);
        m.set_param(map, Param::Parallelism, 50.0);
        m.set_param(interleave, Param::Buffer, 0.0);
        let outcome = optimize(&mut m, 10.0, &Budget { cpu: 1e9, ram_bytes: UNLIMITED }, Algorithm::GradientDescent);
        assert!((1.0..=8.0).contains(&m.param(map, Param::Parallelism)), "{outcome:?}");
        assert!(m.param(interleave, Param::Buffer) >= 1.0);
        assert_eq!(outcome.settings.len(), 5);
        assert!(outcome.settings.windows(2).all(|w| w[0].node <= w[1].node));
    }

    #[test]
    fn hill_climbing_starts_from_the_minimum_so_it_can_lower_a_value() {
        let budget = Budget { cpu: 1e9, ram_bytes: UNLIMITED };
        let (mut low, _, map, prefetch) = figure5(8.0);
        optimize(&mut low, 10.0, &budget, Algorithm::HillClimb);
        let (mut high, ..) = figure5(8.0);
        high.set_param(map, Param::Parallelism, 8.0);
        high.set_param(prefetch, Param::Buffer, 64.0);
        optimize(&mut high, 10.0, &budget, Algorithm::HillClimb);
        for (node, param) in [(map, Param::Parallelism), (prefetch, Param::Buffer)] {
            assert_eq!(high.param(node, param), low.param(node, param), "{param:?}");
        }
        assert!(high.param(map, Param::Parallelism) < 8.0, "the climb stops short of the maximum here");
    }

    #[test]
    fn degenerate_models_are_left_alone() {
        for algorithm in [Algorithm::HillClimb, Algorithm::GradientDescent] {
            for (self_time, period) in [(0.0, 10.0), (1.0, f64::INFINITY), (f64::INFINITY, 10.0)] {
                let mut m = Model::new();
                let file = m.add(Node::new("from_file", Kind::Source, self_time));
                m.add(Node {
                    inputs: vec![file],
                    tunables: vec![tunable(Param::Parallelism, 1.0, 4.0), tunable(Param::Buffer, 1.0, 4.0)],
                    ..Node::new("map", Kind::Async { ratio: 1.0 }, self_time)
                });
                let before = m.clone();
                let outcome = optimize(&mut m, period, &Budget { cpu: 4.0, ram_bytes: UNLIMITED }, algorithm);
                assert_eq!(m.nodes(), before.nodes(), "{algorithm:?} {self_time} {period}: {outcome:?}");
            }
        }
    }

    #[test]
    fn nothing_to_tune() {
        let mut m = Model::new();
        m.add(Node::new("from_file", Kind::Source, 5.0));
        for algorithm in [Algorithm::HillClimb, Algorithm::GradientDescent] {
            let outcome = optimize(&mut m, 10.0, &Budget { cpu: 4.0, ram_bytes: 0.0 }, algorithm);
            assert_eq!(outcome, Outcome { settings: vec![], latency_before: 5.0, latency_after: 5.0, iterations: 0 });
        }
    }
}

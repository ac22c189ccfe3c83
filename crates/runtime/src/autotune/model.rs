//! Analytical latency model of a running input pipeline, after the tf.data paper, section 3.3.2.
//!
//! A pipeline is a tree of [`Node`]s: sources at the leaves, the iterator the consumer pulls from at the
//! root. The model predicts each node's *output latency*, the expected time its consumer waits for one
//! element, from per-element self times measured at run time and the node's tunable parameters.
//!
//! * A source's latency is its self time.
//! * A synchronous node runs on its consumer's thread, so latencies add up: its own self time plus
//!   `ratio` input elements per output element.
//! * An asynchronous node (prefetch, parallel map, interleave) produces ahead of its consumer into a
//!   buffer of `buffer` elements with `parallelism` workers. One element takes the producer
//!   `ratio * input latency + self_time / parallelism`. The buffer is treated as an M/M/1/k queue
//!   with arrival (producer) rate `x` and service (consumer) rate `y`; the consumer only waits when
//!   it finds the buffer empty, so the latency is the producer time scaled by [`p_empty`].
//!
//! The consumer rate `y` of each node is pushed top-down from the root, whose consumer asks every
//! `consumer_period` time units: a node with ratio `r` asks its input `r` times per own request, and
//! an interleave spreads its requests over `cycle_length` open inputs. An interleave's input node
//! stands for every one of those open copies, which is also why resource accounting multiplies
//! everything below an interleave by its cycle length (see [`Model::copies`]).
//!
//! Times are unit-agnostic: self times and the consumer period just have to share one unit.

/// Index of a node in a [`Model`], handed out by [`Model::add`] in insertion order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// How a node turns input elements into output elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Produces elements itself (file reader, range); takes no inputs.
    Source,
    /// Runs on its consumer's thread (batch, filter, sequential map).
    Sync {
        /// Input elements consumed per output element, e.g. 10 for `batch(10)`.
        ratio: f64,
    },
    /// Produces ahead of its consumer into a buffer (prefetch, parallel map).
    Async {
        /// Input elements consumed per output element.
        ratio: f64,
    },
    /// Asynchronous node that cycles over `cycle_length` open inputs, taking one element from each in turn.
    Interleave {
        /// How many inputs are open at once, each seeing `1 / cycle_length` of the interleave's requests;
        /// values below 1 count as 1.
        cycle_length: f64,
    },
}

/// A node parameter the optimizer may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// [`Node::parallelism`].
    Parallelism,
    /// [`Node::buffer`].
    Buffer,
    /// The `cycle_length` of a [`Kind::Interleave`] node.
    CycleLength,
}

impl Param {
    /// The parameter's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Param::Parallelism => "parallelism",
            Param::Buffer => "buffer",
            Param::CycleLength => "cycle_length",
        }
    }
}

/// Declares that the optimizer may set `param` of a node to whole values within `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tunable {
    /// The parameter that may change.
    pub param: Param,
    /// Smallest allowed value.
    pub min: f64,
    /// Largest allowed value.
    pub max: f64,
}

/// One iterator of the running pipeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Human-readable label, used in panic messages.
    pub name: String,
    /// How the node combines its inputs.
    pub kind: Kind,
    /// Time the node itself spends per produced element, excluding time spent waiting on inputs.
    pub self_time: f64,
    /// Workers producing elements concurrently; asynchronous nodes only, values below 1 count as 1.
    pub parallelism: f64,
    /// Produced elements the node may hold ahead of its consumer; asynchronous nodes only.
    pub buffer: f64,
    /// Size of one produced element, for the memory budget.
    pub bytes_per_element: f64,
    /// The share of the self time that keeps a core busy (the rest waits: reads, remote
    /// calls, sleeps); 1 unless measured.
    pub cpu_share: f64,
    /// The nodes this one pulls elements from.
    pub inputs: Vec<NodeId>,
    /// Parameters the optimizer may change.
    pub tunables: Vec<Tunable>,
}

impl Node {
    /// A node with no inputs, no tunables, parallelism and buffer 1 and zero-sized elements.
    pub fn new(name: impl Into<String>, kind: Kind, self_time: f64) -> Self {
        Node {
            name: name.into(),
            kind,
            self_time,
            parallelism: 1.0,
            buffer: 1.0,
            bytes_per_element: 0.0,
            cpu_share: 1.0,
            inputs: Vec::new(),
            tunables: Vec::new(),
        }
    }
}

/// A pipeline as a tree of nodes whose inputs are always added before their consumer.
#[derive(Clone, Debug, Default)]
pub struct Model {
    nodes: Vec<Node>,
    root: Option<NodeId>,
}

impl Model {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `node` and returns its id.
    ///
    /// # Panics
    /// If an input is not in the model yet or already feeds a node (the model is a tree), a source has
    /// inputs, a ratio is not positive and finite, or a tunable has `min > max` or names a cycle length
    /// on a node that is not an interleave.
    pub fn add(&mut self, node: Node) -> NodeId {
        for (i, input) in node.inputs.iter().enumerate() {
            assert!(input.0 < self.nodes.len(), "{}: input {input:?} is not in the model", node.name);
            assert!(
                !self.has_consumer(*input) && !node.inputs[..i].contains(input),
                "{}: {input:?} is consumed twice",
                node.name
            );
        }
        match node.kind {
            Kind::Source => assert!(node.inputs.is_empty(), "{}: a source takes no inputs", node.name),
            Kind::Sync { ratio } | Kind::Async { ratio } => {
                assert!(ratio > 0.0 && ratio.is_finite(), "{}: ratio must be positive and finite", node.name)
            }
            Kind::Interleave { .. } => {}
        }
        for t in &node.tunables {
            assert!(t.min <= t.max, "{}: tunable {:?} has an empty range", node.name, t.param);
            let is_interleave = matches!(node.kind, Kind::Interleave { .. });
            assert!(
                t.param != Param::CycleLength || is_interleave,
                "{}: only interleaves have a cycle length",
                node.name
            );
        }
        self.nodes.push(node);
        NodeId(self.nodes.len() - 1)
    }

    /// Makes `id` the node the consumer pulls from; by default that is the last node added.
    ///
    /// # Panics
    /// If `id` is not in the model or feeds another node.
    pub fn set_root(&mut self, id: NodeId) {
        assert!(id.0 < self.nodes.len() && !self.has_consumer(id), "{id:?} cannot be the root");
        self.root = Some(id);
    }

    /// The node the consumer pulls from, `None` for an empty model.
    pub fn root(&self) -> Option<NodeId> {
        self.root.or_else(|| self.nodes.len().checked_sub(1).map(NodeId))
    }

    /// All nodes, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The current value of `param` on node `id`.
    ///
    /// # Panics
    /// If `id` is not in the model, or on [`Param::CycleLength`] of a node that is not an interleave.
    pub fn param(&self, id: NodeId, param: Param) -> f64 {
        let node = &self.nodes[id.0];
        match (param, node.kind) {
            (Param::Parallelism, _) => node.parallelism,
            (Param::Buffer, _) => node.buffer,
            (Param::CycleLength, Kind::Interleave { cycle_length }) => cycle_length,
            (Param::CycleLength, _) => panic!("{}: only interleaves have a cycle length", node.name),
        }
    }

    /// Sets `param` on node `id` to `value`.
    ///
    /// # Panics
    /// As [`Model::param`].
    pub fn set_param(&mut self, id: NodeId, param: Param, value: f64) {
        let node = &mut self.nodes[id.0];
        match (param, &mut node.kind) {
            (Param::Parallelism, _) => node.parallelism = value,
            (Param::Buffer, _) => node.buffer = value,
            (Param::CycleLength, Kind::Interleave { cycle_length }) => *cycle_length = value,
            (Param::CycleLength, _) => panic!("{}: only interleaves have a cycle length", node.name),
        }
    }

    /// Predicted wait for one element at the root when the consumer asks every `consumer_period`;
    /// 0 for an empty model.
    pub fn output_latency(&self, consumer_period: f64) -> f64 {
        self.root().map_or(0.0, |root| self.latencies(consumer_period)[root.0])
    }

    /// Predicted output latency of every node, indexed by [`NodeId`].
    ///
    /// A `consumer_period` of 0 means an infinitely eager consumer, one of infinity a consumer that
    /// never asks. Nodes outside the root's tree see no requests at all.
    pub fn latencies(&self, consumer_period: f64) -> Vec<f64> {
        let root_rate = if consumer_period > 0.0 { 1.0 / consumer_period } else { f64::INFINITY };
        let mut rates = vec![0.0; self.nodes.len()];
        if let Some(root) = self.root() {
            rates[root.0] = root_rate;
        }
        let rates = self.push_down(rates, |kind, rate| match kind {
            Kind::Source => 0.0,
            Kind::Sync { ratio } | Kind::Async { ratio } => rate * ratio,
            Kind::Interleave { cycle_length } => rate / cycle_length.max(1.0),
        });
        let mut latency = vec![0.0; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            let input: f64 = node.inputs.iter().map(|id| latency[id.0]).sum();
            let work = node.self_time / node.parallelism.max(1.0);
            latency[i] = match node.kind {
                Kind::Source => node.self_time,
                Kind::Sync { ratio } => node.self_time + ratio * input,
                Kind::Async { ratio } => queue_latency(ratio * input + work, rates[i], node.buffer),
                // Every output element is one element of one open input, not of all of them; with
                // several input nodes, the one waited on is an average one. Parallel reads of the
                // open inputs overlap their latencies (tf.data's interleave model does the same).
                Kind::Interleave { .. } => {
                    let read = input / node.inputs.len().max(1) as f64 / node.parallelism.max(1.0);
                    queue_latency(read + work, rates[i], node.buffer)
                }
            };
        }
        latency
    }

    /// How many instances of each node run at once, indexed by [`NodeId`]: the product of the cycle
    /// lengths of the interleaves above it, since each open input is a separate copy of its subtree.
    pub fn copies(&self) -> Vec<f64> {
        self.push_down(vec![1.0; self.nodes.len()], |kind, copies| match kind {
            Kind::Interleave { cycle_length } => copies * cycle_length.max(1.0),
            _ => copies,
        })
    }

    /// How many elements each node produces per element of the root, indexed by [`NodeId`], over
    /// all its open copies: the product of the ratios above it (an interleave's output element
    /// is one element of one of its inputs).
    pub fn visits(&self) -> Vec<f64> {
        self.push_down(vec![1.0; self.nodes.len()], |kind, visits| match kind {
            Kind::Sync { ratio } | Kind::Async { ratio } => visits * ratio,
            Kind::Source | Kind::Interleave { .. } => visits,
        })
    }

    /// Derives a value for every input from its consumer's, starting from `values`.
    fn push_down(&self, mut values: Vec<f64>, to_input: impl Fn(&Kind, f64) -> f64) -> Vec<f64> {
        // Inputs have smaller ids than their consumer, so walking ids downwards settles every consumer
        // before its inputs. Nodes that feed nothing keep the value they were given.
        for (i, node) in self.nodes.iter().enumerate().rev() {
            let value = to_input(&node.kind, values[i]);
            for input in &node.inputs {
                values[input.0] = value;
            }
        }
        values
    }

    fn has_consumer(&self, id: NodeId) -> bool {
        self.nodes.iter().any(|node| node.inputs.contains(&id))
    }
}

/// Expected consumer wait at a buffer of `n` elements whose producer needs `producer_time` per element
/// and whose consumer asks at rate `y`.
fn queue_latency(producer_time: f64, y: f64, n: f64) -> f64 {
    // An instantaneous producer never leaves the consumer waiting; checking first avoids 0 * infinity.
    if producer_time <= 0.0 {
        return 0.0;
    }
    producer_time * p_empty(1.0 / producer_time, y, n)
}

/// Probability that an M/M/1/k buffer of capacity `n` is empty when filled at rate `x` and drained at
/// rate `y`: `(1 - x/y) / (1 - (x/y)^(n+1))`, or `1 / (n + 1)` when the rates match.
///
/// Also defined at the limits: a producer infinitely faster than its consumer (`y == 0` or
/// `x == inf`) gives 0 for `n > 0`, an infinitely eager consumer (`y == inf`) gives 1, and a
/// buffer of size 0 (or below) is always empty.
pub fn p_empty(x: f64, y: f64, n: f64) -> f64 {
    let n = n.max(0.0);
    if x == y {
        return 1.0 / (n + 1.0);
    }
    // Take s = min(x/y, y/x) <= 1 so no power can overflow; for x > y, multiplying numerator and
    // denominator by s^(n+1) gives s^n (1 - s) / (1 - s^(n+1)). The ratio (1 - s) / (1 - s^(n+1)) is
    // evaluated through exp_m1 because both sides cancel catastrophically as s approaches 1.
    let s = if x < y { x / y } else { y / x };
    if s == 1.0 {
        return 1.0 / (n + 1.0);
    }
    let ln_s = s.ln();
    let empty_share = ln_s.exp_m1() / ((n + 1.0) * ln_s).exp_m1();
    if x < y {
        empty_share
    } else {
        s.powf(n) * empty_share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(model: &mut Model, self_time: f64) -> NodeId {
        model.add(Node::new("source", Kind::Source, self_time))
    }

    fn asynchronous(kind: Kind, self_time: f64, parallelism: f64, buffer: f64, input: NodeId) -> Node {
        Node { parallelism, buffer, inputs: vec![input], ..Node::new("async", kind, self_time) }
    }

    /// The Figure 5 pipeline of the tf.data paper in milliseconds, with the ids of its nodes in
    /// pipeline order (from_file, interleave, map, batch, prefetch); the consumer period is 10 ms.
    fn figure5() -> (Model, [NodeId; 5]) {
        let mut m = Model::new();
        let file = source(&mut m, 5.0);
        let interleave = m.add(asynchronous(Kind::Interleave { cycle_length: 2.0 }, 0.0, 1.0, 1.0, file));
        let map = m.add(asynchronous(Kind::Async { ratio: 1.0 }, 2.0, 5.0, 5.0, interleave));
        let batch = m.add(Node { inputs: vec![map], ..Node::new("batch", Kind::Sync { ratio: 10.0 }, 1.0) });
        let prefetch = m.add(asynchronous(Kind::Async { ratio: 1.0 }, 0.0, 1.0, 2.0, batch));
        (m, [file, interleave, map, batch, prefetch])
    }

    /// Latency of a single stage fed by an input of latency `input` and asked at rate `1 / period`.
    fn stage(input: f64, node: impl FnOnce(NodeId) -> Node, period: f64) -> f64 {
        let mut m = Model::new();
        let s = source(&mut m, input);
        m.add(node(s));
        m.output_latency(period)
    }

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    #[test]
    fn p_empty_matching_rates_and_limits() {
        assert_eq!(p_empty(3.0, 3.0, 4.0), 0.2);
        assert_eq!(p_empty(0.0, 0.0, 1.0), 0.5);
        // Continuous across x == y, where the general form is 0 / 0.
        assert!(close(p_empty(1.0 + 1e-12, 1.0, 3.0), 0.25, 1e-9));
        assert!(close(p_empty(1.0 - 1e-12, 1.0, 3.0), 0.25, 1e-9));
        assert!(close(p_empty(0.5, 1.0, 1.0), 0.5 / 0.75, 1e-15));
        // Inverting the rates: the buffer is empty as often as the mirrored buffer is full.
        assert!(close(p_empty(2.0, 1.0, 1.0), 0.5 / 1.5, 1e-15));
        assert_eq!(p_empty(0.0, 1.0, 5.0), 1.0);
        assert_eq!(p_empty(1.0, f64::INFINITY, 5.0), 1.0);
        assert_eq!(p_empty(1.0, 0.0, 5.0), 0.0);
        assert_eq!(p_empty(f64::INFINITY, 1.0, 5.0), 0.0);
        assert_eq!(p_empty(2.0, 1.0, 0.0), 1.0);
        assert_eq!(p_empty(0.5, 1.0, -3.0), 1.0);
        // (x/y)^(n+1) would overflow here.
        assert_eq!(p_empty(10.0, 1.0, 1e6), 0.0);
        assert!(close(p_empty(1.0, 10.0, 1e6), 0.9, 1e-15));
        assert!(close(p_empty(1.0, 10.0, f64::INFINITY), 0.9, 1e-15));
    }

    #[test]
    fn figure5_stage_by_stage_with_the_papers_rounded_inputs() {
        // The paper reports 4.15 here, but 5 * (1 - 0.2) / (1 - 0.2^2) is exactly 25/6 = 4.1667: the
        // paper rounds this stage loosely, and its later stages start from its 4.15.
        let interleave = stage(5.0, |s| asynchronous(Kind::Interleave { cycle_length: 2.0 }, 0.0, 1.0, 1.0, s), 1.0);
        assert!(close(interleave, 25.0 / 6.0, 1e-12));
        assert!(close(interleave, 4.15, 0.02));

        // The map's producer time is 4.15 + 2 / 5 = 4.55, which is what an infinitely eager consumer
        // (period 0) waits; at the paper's rate its buffer brings that down to 3.55.
        let map = |s| asynchronous(Kind::Async { ratio: 1.0 }, 2.0, 5.0, 5.0, s);
        assert!(close(stage(4.15, map, 0.0), 4.55, 1e-12));
        assert!(close(stage(4.15, map, 1.0), 3.55, 0.01));

        let batch = stage(3.55, |s| Node { inputs: vec![s], ..Node::new("b", Kind::Sync { ratio: 10.0 }, 1.0) }, 1.0);
        assert!(close(batch, 36.5, 1e-12));

        let prefetch = stage(36.5, |s| asynchronous(Kind::Async { ratio: 1.0 }, 0.0, 1.0, 2.0, s), 10.0);
        assert!(close(prefetch, 27.0, 0.1));
    }

    #[test]
    fn figure5_end_to_end() {
        let (m, [file, interleave, map, batch, prefetch]) = figure5();
        let latency = m.latencies(10.0);
        assert_eq!(latency[file.0], 5.0);
        // Without the paper's rounding every stage comes out 0.4% to 0.8% above its figure.
        for (id, paper) in [(interleave, 4.15), (map, 3.55), (batch, 36.5), (prefetch, 27.0)] {
            assert!(close(latency[id.0], paper, 0.01 * paper), "{id:?}: {} vs {paper}", latency[id.0]);
        }
        assert!(close(latency[map.0], 3.567, 1e-3));
        assert!(close(latency[batch.0], 10.0 * latency[map.0] + 1.0, 1e-12));
        assert!(close(latency[prefetch.0], 27.22, 0.01));
        assert_eq!(m.output_latency(10.0), latency[prefetch.0]);
    }

    #[test]
    fn more_parallelism_or_buffer_never_increases_latency() {
        let (mut m, [_, interleave, map, _, prefetch]) = figure5();
        for period in [0.0, 1.0, 10.0, 100.0, f64::INFINITY] {
            for (id, param) in [(map, Param::Parallelism), (map, Param::Buffer), (prefetch, Param::Buffer)] {
                let original = m.param(id, param);
                let mut previous = f64::INFINITY;
                for value in 0..64 {
                    m.set_param(id, param, f64::from(value));
                    let latency = m.output_latency(period);
                    assert!(latency <= previous * (1.0 + 1e-12), "{param:?}={value} at period {period}");
                    previous = latency;
                }
                m.set_param(id, param, original);
            }
        }
        // Parallel reads overlap the open inputs' latencies.
        let before = m.output_latency(10.0);
        m.set_param(interleave, Param::Parallelism, 2.0);
        assert!(m.output_latency(10.0) < before);
    }

    #[test]
    fn consumer_rates_follow_ratios_and_cycle_lengths() {
        // A prefetch under an interleave sees fewer requests with a longer cycle, so it waits less.
        let mut m = Model::new();
        let s = source(&mut m, 1.0);
        let p = m.add(asynchronous(Kind::Async { ratio: 1.0 }, 0.0, 1.0, 2.0, s));
        let i = m.add(asynchronous(Kind::Interleave { cycle_length: 1.0 }, 0.0, 1.0, 1.0, p));
        let short = m.latencies(1.0)[p.0];
        m.set_param(i, Param::CycleLength, 4.0);
        assert_eq!(m.param(i, Param::CycleLength), 4.0);
        assert!(m.latencies(1.0)[p.0] < short);
        assert_eq!(m.copies(), vec![4.0, 4.0, 1.0]);
    }

    #[test]
    fn degenerate_inputs_stay_finite() {
        let (mut m, ids) = figure5();
        for period in [0.0, -1.0, 1e-300, 1e300, f64::INFINITY] {
            assert!(m.latencies(period).iter().all(|l| l.is_finite() && *l >= 0.0), "period {period}");
        }
        // An infinitely eager consumer always finds the buffers empty: the sum of the producer times.
        let sync_sum = 10.0 * (5.0 + 2.0 / 5.0) + 1.0;
        assert!(close(m.output_latency(0.0), sync_sum, 1e-9));
        // A consumer that never asks never waits.
        assert_eq!(m.output_latency(f64::INFINITY), 0.0);
        for id in ids {
            m.set_param(id, Param::Parallelism, 0.0);
            m.set_param(id, Param::Buffer, 1e9);
        }
        assert!(m.output_latency(10.0).is_finite());

        let mut zero = Model::new();
        let s = source(&mut zero, 0.0);
        zero.add(asynchronous(Kind::Async { ratio: 3.0 }, 0.0, 1.0, 4.0, s));
        for period in [0.0, 1.0, f64::INFINITY] {
            assert_eq!(zero.output_latency(period), 0.0);
        }
        assert_eq!(Model::new().output_latency(1.0), 0.0);
    }

    #[test]
    fn root_defaults_to_last_node_and_can_be_moved() {
        let (mut m, [_, _, map, batch, prefetch]) = figure5();
        assert_eq!(m.root(), Some(prefetch));
        let extra = source(&mut m, 1.0);
        assert_eq!(m.root(), Some(extra));
        m.set_root(prefetch);
        assert_eq!(m.output_latency(10.0), figure5().0.output_latency(10.0));
        assert!(m.latencies(10.0)[batch.0] > m.latencies(10.0)[map.0]);
    }

    #[test]
    #[should_panic(expected = "consumed twice")]
    fn inputs_feed_one_node() {
        let mut m = Model::new();
        let s = source(&mut m, 1.0);
        m.add(Node { inputs: vec![s], ..Node::new("a", Kind::Sync { ratio: 1.0 }, 0.0) });
        m.add(Node { inputs: vec![s], ..Node::new("b", Kind::Sync { ratio: 1.0 }, 0.0) });
    }

    #[test]
    #[should_panic(expected = "only interleaves")]
    fn cycle_length_needs_an_interleave() {
        let (mut m, [file, ..]) = figure5();
        m.set_param(file, Param::CycleLength, 2.0);
    }
}

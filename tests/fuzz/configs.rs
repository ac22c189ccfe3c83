//! The configurations a case runs under: the reference (the optimizer off, default chunks)
//! and every other way a user can run the same pipeline, each of which must yield the
//! reference's items.

use flumen::Options;

/// Chunk sizes the configurations vary (besides the default).
pub const CHUNKS: [usize; 5] = [1, 2, 3, 7, 64];

/// One way to run a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Config {
    /// `Options::default().without_optimizations()`, at `chunk_rows` (`None`: the default):
    /// with the default, the reference every other configuration is compared with.
    Off(Option<usize>),
    /// `Options::default()` at `chunk_rows` (`None`: the default).
    Default(Option<usize>),
    /// The default with every rule of the `i`-th module of `rule_names()` switched off.
    FamilyOff(usize),
    /// The default with one worker thread.
    Threads1,
    /// The default with autotuning off (no parallelization stage, no injected prefetch).
    AutotuneOff,
    /// The default with stage fusion off.
    StageFusionOff,
    /// `Dataset::deserialize(&ds.serialize()?, ds.registry())` of the written plan, run with
    /// the default options.
    Serde,
}

/// The reference configuration.
pub const REFERENCE: Config = Config::Off(None);

impl Config {
    /// Every configuration but the reference, in a fixed order.
    pub fn all() -> Vec<Config> {
        let mut out: Vec<Config> = CHUNKS.iter().map(|&c| Config::Off(Some(c))).collect();
        out.push(Config::Default(None));
        out.extend((0..families().len()).map(Config::FamilyOff));
        out.extend([Config::Threads1, Config::AutotuneOff, Config::StageFusionOff]);
        out.extend(CHUNKS.iter().map(|&c| Config::Default(Some(c))));
        out.push(Config::Serde);
        out
    }

    /// Whether the optimizer runs in this configuration.
    pub fn optimizes(self) -> bool {
        !matches!(self, Config::Off(_))
    }

    /// The options the case's dataset runs with (for [`Config::Serde`], those of the
    /// deserialized dataset).
    pub fn options(self) -> Options {
        let optimized = Options::default();
        match self {
            Config::Off(chunk) => with_chunk(Options::default().without_optimizations(), chunk),
            Config::Default(chunk) => with_chunk(optimized, chunk),
            Config::FamilyOff(i) => {
                families()[i].1.iter().fold(optimized, |o, rule| o.with_optimization_rule(rule, false))
            }
            Config::Threads1 => optimized.with_threads(1),
            Config::AutotuneOff => optimized.with_autotune(false),
            Config::StageFusionOff => optimized.with_stage_fusion(false),
            Config::Serde => optimized,
        }
    }

    /// The options with rules `off` switched off too (to check whether a failure is a rule's).
    pub fn options_without(self, off: &[&str]) -> Options {
        off.iter().fold(self.options(), |o, rule| o.with_optimization_rule(rule, false))
    }

    /// A short name (statistics, failure messages).
    pub fn name(self) -> String {
        match self {
            Config::Off(None) => "optimizer off (reference)".into(),
            Config::Off(Some(c)) => format!("optimizer off, chunk_rows {c}"),
            Config::Default(None) => "default".into(),
            Config::Default(Some(c)) => format!("default, chunk_rows {c}"),
            Config::FamilyOff(i) => format!("{} rules off", families()[i].0),
            Config::Threads1 => "threads 1".into(),
            Config::AutotuneOff => "autotune off".into(),
            Config::StageFusionOff => "stage fusion off".into(),
            Config::Serde => "deserialize(serialize())".into(),
        }
    }

    /// The builder calls that set these options, for a repro.
    pub fn rust(self) -> String {
        match self {
            Config::Off(None) => "Options::default().without_optimizations()".into(),
            Config::Off(Some(c)) => format!("Options::default().without_optimizations().with_chunk_rows({c})"),
            Config::Default(None) | Config::Serde => "Options::default()".into(),
            Config::Default(Some(c)) => format!("Options::default().with_chunk_rows({c})"),
            Config::FamilyOff(i) => {
                let rules: Vec<String> =
                    families()[i].1.iter().map(|r| format!(".with_optimization_rule({r:?}, false)")).collect();
                format!("Options::default(){}", rules.join(""))
            }
            Config::Threads1 => "Options::default().with_threads(1)".into(),
            Config::AutotuneOff => "Options::default().with_autotune(false)".into(),
            Config::StageFusionOff => "Options::default().with_stage_fusion(false)".into(),
        }
    }
}

fn with_chunk(o: Options, chunk: Option<usize>) -> Options {
    match chunk {
        Some(c) => o.with_chunk_rows(c),
        None => o,
    }
}

/// The optimizer's rule modules and their rules (`rule_names()`).
pub fn families() -> &'static [(&'static str, Vec<String>)] {
    static FAMILIES: std::sync::LazyLock<Vec<(&'static str, Vec<String>)>> =
        std::sync::LazyLock::new(flumen::crates::optimizer::rule_names);
    &FAMILIES
}

/// `count` configurations drawn by `seed` (without repeats), for a short run.
pub fn sample(seed: u64, count: usize) -> Vec<Config> {
    let mut all = Config::all();
    let mut out = Vec::new();
    let mut z = seed;
    while out.len() < count && !all.is_empty() {
        z = crate::common::pipelines::splitmix(z);
        out.push(all.remove((z % all.len() as u64) as usize));
    }
    out.sort();
    out
}

//! Known, reported defects that are open: a failure one of them explains is counted, not
//! reported, so that a run shows only new findings. Each matcher is as narrow as the defect
//! allows: where a rule causes it, the failure must go away with that rule off.
//!
//! `FLUMEN_FUZZ_FIXED` lists defects (by id, comma-separated, or `all`) to treat as fixed:
//! their failures fail the run again. Remove an entry from [`DEFECTS`] once its fix lands.

use std::sync::Mutex;

use super::configs::{Config, REFERENCE};
use super::{build_for, compare_config, compare_mode, run, Failure, Kind, Tier};
use crate::common::pipelines::families::{expr_family, pred_family};
use crate::common::pipelines::{marks, prepare, Case, Flavor, OpRecipe, SourceRecipe};

/// An open defect and how to recognize its failures.
pub struct Defect {
    /// Its number in the report.
    pub id: u8,
    /// What it is.
    pub summary: &'static str,
    /// Whether it explains `failure` of `case`.
    pub matches: fn(&Case, &Failure, &Tier) -> bool,
}

/// The open defects.
pub const DEFECTS: &[Defect] = &[
    Defect {
        id: 1,
        summary: "filter-fusion loops through a no-op filter (`map(f1 := -3).filter(f1 > -4)` optimizes for ~70 s)",
        matches: |case, f, _| {
            let filters = has(case, |r| {
                matches!(r, OpRecipe::Filter(_) | OpRecipe::FilterWith { .. } | OpRecipe::MapThenFilter { .. })
            });
            matches!(f.kind, Kind::Slow | Kind::Timeout)
                && filters
                && optimizes_without(case, f.config, &["filter-fusion"])
        },
    },
    Defect {
        id: 2,
        summary: "fold-filter drops the errors of `true OR e`, `e OR true`, `false AND e`",
        matches: |case, f, tier| mismatch(f) && and_or(case) && passes_without(case, f, &["fold-filter"], tier),
    },
    Defect {
        id: 3,
        summary: "map-fusion changes a field's type (a narrow literal cast, then an expression over it)",
        matches: |case, f, tier| {
            let typed = matches!(f.kind, Kind::Mismatch { schema: true, .. })
                || (f.kind == Kind::Panic && f.text.contains("different element specs"));
            typed && passes_without(case, f, &["map-fusion"], tier)
        },
    },
    Defect {
        id: 4,
        summary: "map-batch-fusion parallelizes a stateful closure map under batch_parallel",
        matches: |case, f, tier| {
            let shape = has(case, |r| matches!(r, OpRecipe::Batch { par: Some(_), .. })) && stateful(case);
            mismatch(f) && shape && passes_without(case, f, &["map-batch-fusion"], tier)
        },
    },
    Defect {
        id: 5,
        summary: "a constant that fails is evaluated on elements an earlier filter dropped",
        matches: |case, f, _| mismatch(f) && failing_constant(case),
    },
    Defect {
        id: 6,
        summary: "results depend on chunk_rows: a stateful closure or a cache under an early stop",
        matches: |case, f, _| {
            let below_stop = |first: &dyn Fn(&OpRecipe) -> bool| {
                case.ops.iter().position(first).is_some_and(|i| case.ops[i..].iter().any(stops))
            };
            let shape = below_stop(&|r| marks(r).stateful || matches!(r, OpRecipe::CacheTo | OpRecipe::Cache))
                || has(case, |r| matches!(r, OpRecipe::CacheTake { .. }))
                || (matches!(case.source, SourceRecipe::Generator { stateful: true, .. })
                    && case.ops.iter().any(stops));
            mismatch(f) && shape
        },
    },
    Defect {
        id: 7,
        summary: "take/skip/shard/enumerate count errors as elements (skip restarts its count after an error)",
        matches: |case, f, _| {
            let counting = has(case, |r| {
                matches!(
                    r,
                    OpRecipe::Take { .. }
                        | OpRecipe::Skip { .. }
                        | OpRecipe::Shard { .. }
                        | OpRecipe::Enumerate { .. }
                        | OpRecipe::RepeatForeverTake { .. }
                        | OpRecipe::Concatenate { .. }
                        | OpRecipe::CacheTake { .. }
                        | OpRecipe::Sample { .. }
                )
            });
            mismatch(f) && f.error_before && counting
        },
    },
    // Found by this fuzzer (new; reported with a repro).
    Defect {
        id: 101,
        summary: "fold-map, filter-fusion, filter-hoist (the rules that simplify what they build) drop the errors \
                  of `true OR e`, `false AND e`, `e AND false`, as fold-filter does",
        matches: |case, f, tier| mismatch(f) && folds(case) && passes_without(case, f, FOLDING, tier),
    },
    Defect {
        id: 102,
        summary: "a plan with a NaN or infinite float literal serializes (as null) but does not deserialize",
        matches: |_, f, _| f.config == Config::Serde && f.kind == Kind::Build && f.text.contains("null, expected f64"),
    },
];

/// The rules that simplify expressions (and drop `AND`/`OR` operands) as they go.
const FOLDING: &[&str] =
    &["fold-filter", "fold-map", "filter-fusion", "filter-hoist", "map-filter-fusion", "map-fusion", "noop-filter"];

/// Whether `case` optimizes under `config` with `rules` off too, every stage saturating
/// within the limits (without running it: the slow configuration is not run again).
fn optimizes_without(case: &Case, config: Config, rules: &[&str]) -> bool {
    let dir = tempfile::tempdir().expect("a temporary directory");
    prepare(case, dir.path());
    let Ok((_, ds)) = build_for(case, config, rules, dir.path()) else { return false };
    ds.optimization_report().is_ok_and(|r| {
        r.stages.iter().all(|s| s.stop_reason == "saturated" && s.egraph_nodes <= super::MAX_EGRAPH_NODES)
    })
}

fn mismatch(f: &Failure) -> bool {
    matches!(f.kind, Kind::Mismatch { .. })
}

fn has(case: &Case, p: impl Fn(&OpRecipe) -> bool) -> bool {
    case.ops.iter().any(p)
}

fn stops(r: &OpRecipe) -> bool {
    marks(r).stops
}

fn stateful(case: &Case) -> bool {
    has(case, |r| {
        matches!(r, OpRecipe::MapClosure { flavor: Flavor::Stateful | Flavor::Random, .. })
            || matches!(r, OpRecipe::MapBatchClosure { state: 1.., .. })
    })
}

/// The case draws an expression or predicate of the `AND`/`OR` with a fallible operand
/// family.
fn and_or(case: &Case) -> bool {
    draws(case, &|k| expr_family(k) == "AND/OR with a fallible operand", &|k, _| {
        pred_family(k) == "AND/OR with a fallible operand"
    })
}

/// The case draws a boolean that folds to a constant whatever a fallible operand gives: the
/// `AND`/`OR` family, or a constant predicate (which a fused filter `e AND false` meets).
fn folds(case: &Case) -> bool {
    and_or(case)
        || draws(case, &|_| false, &|k, c| k == 5 || (pred_family(k) == "constant (may fail)" && c.rem_euclid(3) != 1))
}

/// The case draws an expression whose kind `expr` accepts or a predicate whose kind and
/// constant `pred` accepts.
fn draws(case: &Case, expr: &dyn Fn(u8) -> bool, pred: &dyn Fn(u8, i64) -> bool) -> bool {
    has(case, |r| match r {
        OpRecipe::MapExpr { e1, e2, .. } => expr(e1.kind) || expr(e2.kind),
        OpRecipe::MapSelectComputed { e, .. } => expr(e.kind),
        OpRecipe::MapThenFilter { e, p, q } => {
            expr(e.kind) || pred(p.kind, p.k) || q.as_ref().is_some_and(|q| pred(q.kind, q.k))
        }
        OpRecipe::Filter(p) | OpRecipe::TakeWhile(p) | OpRecipe::FilterWith { p, .. } => pred(p.kind, p.k),
        _ => false,
    })
}

/// The case draws an expression or predicate of the "constant that fails" families.
fn failing_constant(case: &Case) -> bool {
    draws(case, &|k| expr_family(k) == "constant that fails", &|k, c| {
        pred_family(k) == "constant (may fail)" && c.rem_euclid(3) == 1
    })
}

/// Whether the failing configuration passes with `rules` switched off too, twice, and fails
/// again as it is in one of three tries (a failure that comes and goes with timing may pass
/// twice by chance; one that never comes back is no rule's).
fn passes_without(case: &Case, f: &Failure, rules: &[&str], tier: &Tier) -> bool {
    f.config.optimizes()
        && (0..2).all(|_| same_config_passes(case, f.config, rules, tier) == Some(true))
        && (0..3).any(|_| same_config_passes(case, f.config, &[], tier) == Some(false))
}

/// Whether `config` (with `rules` off) yields the reference's items; `None` when the
/// reference does not run.
fn same_config_passes(case: &Case, config: Config, rules: &[&str], tier: &Tier) -> Option<bool> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    prepare(case, dir.path());
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tier = &Tier { record: false, ..tier.clone() };
        let reference = run(case, REFERENCE, &[], dir.path(), tier, 2).ok()?;
        let mode = compare_mode(&reference.built.marks, reference.capped);
        Some(compare_config(case, config, rules, dir.path(), tier, &reference, mode).is_ok())
    }))
    .unwrap_or(Some(false))
}

/// The defects treated as fixed (`FLUMEN_FUZZ_FIXED`).
fn fixed(id: u8) -> bool {
    static FIXED: Mutex<Option<String>> = Mutex::new(None);
    let mut cached = FIXED.lock().unwrap_or_else(|p| p.into_inner());
    let list = cached.get_or_insert_with(|| std::env::var("FLUMEN_FUZZ_FIXED").unwrap_or_default());
    list.trim() == "all" || list.split(',').any(|s| s.trim() == id.to_string())
}

/// The open defect that explains `failure`, if one does.
pub fn explain(case: &Case, failure: &Failure, tier: &Tier) -> Option<u8> {
    let id = DEFECTS.iter().find(|d| !fixed(d.id) && (d.matches)(case, failure, tier)).map(|d| d.id)?;
    super::stats::known(id, case);
    Some(id)
}

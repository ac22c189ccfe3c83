//! Per-rule tests written as before/after s-expressions: after saturating with one rule
//! module, `before` and `after` are in the same e-class — or, where a guard must stop the
//! rule, they are not.

use egg::{RecExpr, Runner, SimpleScheduler};
use flumen_optimizer::rules::{eliminate, fusion, image, parallelize, pushdown, vectorize};
use flumen_optimizer::{raise, Graph, Node, Rule};

/// Saturates `before` with `rules`; true when `after` is then equivalent to it. Both must
/// be well-typed plans.
fn equivalent(rules: &[Rule], before: &str, after: &str) -> bool {
    let before: RecExpr<Node> = before.parse().unwrap_or_else(|e| panic!("bad before {before}: {e}"));
    let after: RecExpr<Node> = after.parse().unwrap_or_else(|e| panic!("bad after {after}: {e}"));
    raise(&before).expect("the before plan type-checks");
    raise(&after).expect("the after plan type-checks");
    let runner: Runner<Node, _> = Runner::new(Default::default())
        .with_egraph(Graph::default())
        .with_expr(&before)
        .with_scheduler(SimpleScheduler)
        .with_iter_limit(8)
        .with_node_limit(5_000)
        .run(rules);
    let root = runner.egraph.find(runner.roots[0]);
    runner.egraph.lookup_expr(&after).is_some_and(|id| runner.egraph.find(id) == root)
}

macro_rules! rewrites {
    ($name:ident, $rules:expr, $before:expr => $after:expr) => {
        #[test]
        fn $name() {
            assert!(equivalent(&$rules, &$before, &$after), "expected\n  {}\nto rewrite to\n  {}", $before, $after);
        }
    };
    ($name:ident, $rules:expr, $before:expr => not $after:expr) => {
        #[test]
        fn $name() {
            assert!(
                !equivalent(&$rules, &$before, &$after),
                "the guard must stop\n  {}\nfrom rewriting to\n  {}",
                $before,
                $after
            );
        }
    };
}

/// range(0, 10): field `value` (int64).
const RANGE: &str = r#"(source #{'source':{'source':'range','start':0,'stop':10,'step':1}})"#;

fn range() -> String {
    RANGE.to_string()
}

fn s(text: &str) -> String {
    text.replace("RANGE", RANGE)
}

// ---- eliminate ----
rewrites!(take_all_is_a_noop, eliminate::rules(), s("(take -1 RANGE)") => range());
rewrites!(take_more_than_cardinality_stays_since_it_can_stop_errors, eliminate::rules(), s("(take 10 RANGE)") => not range());
rewrites!(take_fewer_than_cardinality_stays, eliminate::rules(), s("(take 9 RANGE)") => not range());
rewrites!(skip_zero_is_a_noop, eliminate::rules(), s("(skip 0 RANGE)") => range());
rewrites!(skip_one_stays, eliminate::rules(), s("(skip 1 RANGE)") => not range());
rewrites!(repeat_once_stays_since_it_salts_reshuffles, eliminate::rules(), s("(repeat 1 RANGE)") => not range());
rewrites!(repeat_twice_stays, eliminate::rules(), s("(repeat 2 RANGE)") => not range());
rewrites!(shard_one_is_a_noop, eliminate::rules(), s("(shard 1 0 RANGE)") => range());
rewrites!(shard_two_stays, eliminate::rules(), s("(shard 2 0 RANGE)") => not range());
rewrites!(prefetch_zero_is_a_noop, eliminate::rules(), s("(prefetch 0 RANGE)") => range());
rewrites!(prefetch_autotune_stays, eliminate::rules(), s("(prefetch autotune RANGE)") => not range());
rewrites!(identity_map_is_a_noop, eliminate::rules(), s("(map (exprs keep (out value (col value))) default none RANGE)") => range());
rewrites!(identity_select_is_a_noop, eliminate::rules(), s("(map (exprs only (out value (col value))) default none RANGE)") => range());
rewrites!(renaming_map_stays, eliminate::rules(), s("(map (exprs only (out v (col value))) default none RANGE)") => not range());
rewrites!(filter_true_is_a_noop, eliminate::rules(), s("(filter true default none RANGE)") => range());
rewrites!(constants_fold_in_maps, eliminate::rules(), s("(map (exprs keep (out y (+ (col value) (* 2 3)))) default none RANGE)") => s("(map (exprs keep (out y (+ (col value) 6))) default none RANGE)"));
rewrites!(a_filter_folding_to_true_disappears, eliminate::rules(), s("(filter (< 1 2) default none RANGE)") => range());

// ---- fusion ----
rewrites!(
    map_map_fuses_by_substitution,
    fusion::rules(),
    s("(map (exprs only (out z (+ (col y) 1.0))) default none (map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map (exprs only (out z (+ (* (cast (col value) float64) 2.0) 1.0))) default none RANGE)")
);
rewrites!(
    map_map_fusion_keeps_fields_in_place,
    fusion::rules(),
    s("(map (exprs keep (out value (+ (col value) 1)) (out w (col y))) default none (map (exprs keep (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map (exprs keep (out y (* (cast (col value) float64) 2.0)) (out value (+ (col value) 1)) (out w (* (cast (col value) float64) 2.0))) default none RANGE)")
);
rewrites!(
    map_map_fusion_drops_dead_infallible_fields,
    fusion::rules(),
    s("(map (exprs only (out a (col value))) default none (map (exprs keep (out dead (* (cast (col value) float64) 3.0))) default none RANGE))")
        => s("(map (exprs only (out a (col value))) default none RANGE)")
);
rewrites!(
    map_map_fusion_keeps_a_field_that_can_fail,
    fusion::rules(),
    s("(map (exprs only (out a (col value))) default none (map (exprs keep (out dead (/ 10 (col value)))) default none RANGE))")
        => not s("(map (exprs only (out a (col value))) default none RANGE)")
);
rewrites!(
    closure_maps_do_not_fuse,
    fusion::rules(),
    s(r#"(map (exprs only (out a (col value))) default none (map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':true}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE))"#)
        => not s(r#"(map (exprs only (out a (col value))) default none RANGE)"#)
);
rewrites!(
    filters_fuse_with_and,
    fusion::rules(),
    s("(filter (< (col value) 8) default none (filter (> (col value) 2) default none RANGE))") => s("(filter (and (> (col value) 2) (< (col value) 8)) default none RANGE)")
);
rewrites!(
    filter_fusion_stops_when_the_second_predicate_can_fail,
    fusion::rules(),
    s("(filter (> (/ 10 (col value)) 1) default none (filter (!= (col value) 0) default none RANGE))")
        => not s("(filter (and (!= (col value) 0) (> (/ 10 (col value)) 1)) default none RANGE)")
);
rewrites!(
    filter_hoists_above_a_map_it_does_not_read,
    fusion::rules(),
    s("(filter (> (col value) 3) default none (map (exprs keep (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map (exprs keep (out y (* (cast (col value) float64) 2.0))) default none (filter (> (col value) 3) default none RANGE))")
);
rewrites!(
    map_filter_fusion_substitutes_computed_fields,
    fusion::rules(),
    s("(filter (> (col y) 6.0) default none (map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map (exprs only (out y (* (cast (col value) float64) 2.0))) default none (filter (> (* (cast (col value) float64) 2.0) 6.0) default none RANGE))")
);
rewrites!(
    filter_does_not_hoist_above_a_map_that_can_overflow,
    fusion::rules(),
    s("(filter (> (col value) 3) default none (map (exprs keep (out y (* (col value) 2))) default none RANGE))")
        => not s("(map (exprs keep (out y (* (col value) 2))) default none (filter (> (col value) 3) default none RANGE))")
);
rewrites!(
    filter_does_not_hoist_above_a_map_that_can_fail,
    fusion::rules(),
    s("(filter (> (col value) 3) default none (map (exprs keep (out y (/ 10 (col value)))) default none RANGE))")
        => not s("(map (exprs keep (out y (/ 10 (col value)))) default none (filter (> (col value) 3) default none RANGE))")
);
/// A closure's output with a float64[4] tensor `x` and a float64 scalar `w`.
const TENSORS: &str = r#"(map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':true}} #{'spec':{'fields':[{'name':'x','dtype':'float64','shape':[4],'kind':'dense'},{'name':'w','dtype':'float64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE)"#;
rewrites!(
    filter_moves_below_a_tensor_map_that_cannot_fail,
    fusion::rules(),
    s(&format!("(filter (> (col w) 0.5) default none (map (exprs only (out x (* (col x) (col w))) (out w (col w))) default none {TENSORS}))"))
        => s(&format!("(map (exprs only (out x (* (col x) (col w))) (out w (col w))) default none (filter (> (col w) 0.5) default none {TENSORS}))"))
);
rewrites!(
    map_and_batch_fuse,
    fusion::rules(),
    s("(batch 4 true default none (map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map_and_batch (exprs only (out y (* (cast (col value) float64) 2.0))) 4 true default none RANGE)")
);
rewrites!(
    shuffle_and_repeat_fuse,
    fusion::rules(),
    s("(repeat 3 (shuffle 5 42 true RANGE))") => s("(shuffle_and_repeat 5 42 true 3 RANGE)")
);

// ---- vectorize ----
rewrites!(
    pfor_moves_the_map_after_the_batch,
    vectorize::rules(),
    s("(batch 4 false default none (map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE))")
        => s("(map (pfor (exprs only (out y (* (cast (col value) float64) 2.0)))) default none (batch 4 false default none RANGE))")
);
rewrites!(
    pfor_does_not_batch_before_a_map_that_can_fail,
    vectorize::rules(),
    s("(batch 4 false default none (map (exprs only (out y (/ 8 (col value)))) default none RANGE))")
        => not s("(map (pfor (exprs only (out y (/ 8 (col value))))) default none (batch 4 false default none RANGE))")
);
rewrites!(
    pfor_vectorizes_map_and_batch,
    vectorize::rules(),
    s("(map_and_batch (exprs keep (out y (* (cast (col value) float64) 2.0))) 4 true default none RANGE)")
        => s("(map (pfor (exprs keep (out y (* (cast (col value) float64) 2.0)))) default none (batch 4 true default none RANGE))")
);
rewrites!(
    pfor_runs_a_map_over_chunks,
    vectorize::rules(),
    s("(map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE)")
        => s("(map (pfor (exprs only (out y (* (cast (col value) float64) 2.0)))) default none RANGE)")
);
rewrites!(
    pfor_runs_a_filter_over_chunks,
    vectorize::rules(),
    s("(filter (> (col value) 2) default none RANGE)") => s("(filter (pfor (> (col value) 2)) default none RANGE)")
);
rewrites!(
    closures_are_not_vectorized,
    vectorize::rules(),
    s(r#"(batch 4 false default none (map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':true}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE))"#)
        => not s(r#"(map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':true}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none (batch 4 false default none RANGE))"#)
);

// ---- parallelize ----
rewrites!(
    stateless_maps_become_parallel,
    parallelize::rules(),
    s("(map (exprs only (out y (* (cast (col value) float64) 2.0))) default none RANGE)")
        => s("(map (exprs only (out y (* (cast (col value) float64) 2.0))) autotune none RANGE)")
);
rewrites!(
    stateful_closures_stay_sequential,
    parallelize::rules(),
    s(r#"(map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':false}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE)"#)
        => not s(r#"(map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':false}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) autotune none RANGE)"#)
);
rewrites!(
    prefetch_is_injected_at_the_output,
    parallelize::rules(),
    s("(sink RANGE)") => s("(sink (prefetch autotune RANGE))")
);
// A closure whose calls take a process-wide lock (a Python function and the GIL) gets no
// threads: neither parallel calls nor a prefetch after it. The same closure without the
// flag gets both.
const SHARED_CLOSURE: &str = r#"(map (closure #{'closure':{'name':'f','kind':'per_batch','deterministic':true,'stateless':true,'exclusive':EXCLUSIVE}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) CALLS none RANGE)"#;

fn shared_closure(exclusive: bool, calls: &str) -> String {
    s(SHARED_CLOSURE).replace("EXCLUSIVE", &exclusive.to_string()).replace("CALLS", calls)
}

rewrites!(
    exclusive_closures_stay_sequential,
    parallelize::rules(),
    shared_closure(true, "default") => not shared_closure(true, "autotune")
);
rewrites!(
    closures_without_the_lock_become_parallel,
    parallelize::rules(),
    shared_closure(false, "default") => shared_closure(false, "autotune")
);
rewrites!(
    prefetch_is_not_injected_after_an_exclusive_closure,
    parallelize::rules(),
    format!("(sink {})", shared_closure(true, "default"))
        => not format!("(sink (prefetch autotune {}))", shared_closure(true, "default"))
);
rewrites!(
    exclusive_filter_closures_stay_sequential,
    parallelize::rules(),
    s(r#"(filter (closure #{'closure':{'name':'p','kind':'per_batch','deterministic':true,'stateless':true,'exclusive':true}}) default none RANGE)"#)
        => not s(r#"(filter (closure #{'closure':{'name':'p','kind':'per_batch','deterministic':true,'stateless':true,'exclusive':true}}) autotune none RANGE)"#)
);
rewrites!(
    stateless_filters_become_parallel,
    parallelize::rules(),
    s("(filter (> (col value) 3) default none RANGE)") => s("(filter (> (col value) 3) autotune none RANGE)")
);
rewrites!(
    stateful_filter_closures_stay_sequential,
    parallelize::rules(),
    s(r#"(filter (closure #{'closure':{'name':'p','kind':'per_element','deterministic':true,'stateless':false}}) default none RANGE)"#)
        => not s(r#"(filter (closure #{'closure':{'name':'p','kind':'per_element','deterministic':true,'stateless':false}}) autotune none RANGE)"#)
);
rewrites!(
    fused_filters_keep_the_wider_parallelism,
    fusion::rules(),
    s("(filter (< (col value) 8) 4 none (filter (> (col value) 2) autotune true RANGE))")
        => s("(filter (and (> (col value) 2) (< (col value) 8)) autotune true RANGE)")
);
// As tf.data: a prefetch only after a synchronous last transformation.
rewrites!(
    prefetch_is_not_injected_over_a_parallel_map,
    parallelize::rules(),
    s("(sink (map (exprs only (out y (col value))) 2 none RANGE))")
        => not s("(sink (prefetch autotune (map (exprs only (out y (col value))) 2 none RANGE)))")
);
rewrites!(
    prefetch_is_not_injected_over_a_map_the_stage_parallelizes,
    parallelize::rules(),
    s("(sink (map (exprs only (out y (col value))) default none RANGE))")
        => not s("(sink (prefetch autotune (map (exprs only (out y (col value))) autotune none RANGE)))")
);
rewrites!(
    prefetch_is_not_injected_over_a_parallel_batch,
    parallelize::rules(),
    s("(sink (batch 4 false autotune none RANGE))") => not s("(sink (prefetch autotune (batch 4 false autotune none RANGE)))")
);
rewrites!(
    prefetch_is_injected_over_a_sequential_batch_of_a_parallel_map,
    parallelize::rules(),
    s("(sink (batch 4 false default none (map (exprs only (out y (col value))) default none RANGE)))")
        => s("(sink (prefetch autotune (batch 4 false default none (map (exprs only (out y (col value))) autotune none RANGE))))")
);
// A prefetch would call the closure ahead of what the consumer takes.
rewrites!(
    prefetch_is_not_injected_over_a_closure_that_keeps_state,
    parallelize::rules(),
    s(r#"(sink (map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':false}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE))"#)
        => not s(r#"(sink (prefetch autotune (map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':false}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE)))"#)
);
rewrites!(
    prefetch_is_not_injected_twice,
    parallelize::rules(),
    s("(sink (prefetch 2 RANGE))") => not s("(sink (prefetch autotune (prefetch 2 RANGE)))")
);

/// The output's top operator after the default optimizer, as `(name, num_parallel_calls)`.
fn optimized_top(plan: &str) -> (String, Option<flumen_ir::Tunable>) {
    let plan = raise(&s(plan).parse().unwrap()).expect("the plan type-checks");
    let report = flumen_optimizer::optimize(&plan, &flumen_optimizer::OptimizerConfig::default()).unwrap();
    let op = report.output.op();
    let calls = match op {
        flumen_ir::Op::Map { num_parallel_calls, .. } => Some(*num_parallel_calls),
        _ => None,
    };
    (op.name().to_string(), calls)
}

#[test]
fn an_output_map_that_only_renames_runs_parallel_without_a_prefetch() {
    // No operations to divide among the cores, but its outputs are still written by the
    // workers: the parallel map is cheaper, so it is extracted and needs no prefetch.
    assert_eq!(
        optimized_top("(map (exprs only (out y (col value))) default none RANGE)"),
        ("map".to_string(), Some(flumen_ir::Tunable::Autotune))
    );
    // A closure that keeps state stays sequential, and nothing reads ahead of it.
    let closure = r#"(map (closure #{'closure':{'name':'f','kind':'per_element','deterministic':true,'stateless':false}} #{'spec':{'fields':[{'name':'value','dtype':'int64','shape':[],'kind':'dense'}],'batch_dims':0}}) default none RANGE)"#;
    assert_eq!(optimized_top(closure), ("map".to_string(), Some(flumen_ir::Tunable::Default)));
    // Nor of one below an expression map: the map is not parallelized either.
    let above = format!("(map (exprs only (out y (col value))) default none {closure})");
    assert_eq!(optimized_top(&above), ("map".to_string(), Some(flumen_ir::Tunable::Default)));
}

#[test]
fn switching_map_parallelization_off_keeps_the_injected_prefetch() {
    let plan = raise(&s("(map (exprs only (out y (col value))) default none RANGE)").parse().unwrap()).unwrap();
    let config = flumen_optimizer::OptimizerConfig::default().with_rule("map-parallelization", false);
    let output = flumen_optimizer::optimize(&plan, &config).unwrap().output;
    assert_eq!(output.op().name(), "prefetch", "{output}");
}

#[test]
fn pushdown_rules_leave_sources_without_pushdown_alone() {
    let before = s("(map (exprs only (out y (col value))) default none RANGE)");
    assert!(!equivalent(
        &pushdown::rules(),
        &before,
        &s("(map (exprs only (out y (col value))) default none (take 3 RANGE))")
    ));
}

// ---- image ----
/// A JPEG read from the file named by `value` (the plan only has to type-check).
const JPEG: &str = "(call decode_jpeg (call read_file (cast (col value) string)) 3)";
const JPEG_ROWS: &str = "(call decode_jpeg_rows (call read_file (cast (col value) string)) 3)";

fn image_map(out: &str) -> String {
    s(&format!("(map (exprs only (out x {out})) default none RANGE)"))
}

rewrites!(a_random_crop_of_a_jpeg_decodes_only_its_rows, image::rules(),
    image_map(&format!("(call random_crop {JPEG} 8 8 7)")) => image_map(&format!("(call random_crop {JPEG_ROWS} 8 8 7)")));
rewrites!(a_fixed_crop_under_a_flip_decodes_only_its_rows, image::rules(),
    image_map(&format!("(call flip_left_right (call crop {JPEG} 1 2 8 8))"))
        => image_map(&format!("(call flip_left_right (call crop {JPEG_ROWS} 1 2 8 8))")));
rewrites!(a_resize_of_the_whole_jpeg_decodes_it_whole, image::rules(),
    image_map(&format!("(call resize {JPEG} 8 8 %22area%22)")) => not image_map(&format!("(call resize {JPEG_ROWS} 8 8 %22area%22)")));

/// A map drawing a random crop of a JPEG, keeping its input, over `inner`.
fn random_crop_over(inner: &str) -> String {
    format!("(map (exprs keep (out x (call random_crop {JPEG} 8 8 7))) default none {inner})")
}

rewrites!(a_random_map_fuses_with_a_map_that_cannot_fail, fusion::rules(),
    random_crop_over(&s("(map (exprs keep (out y (+ (col value) 1.0))) default none RANGE)"))
        => s(&format!("(map (exprs keep (out y (+ (col value) 1.0)) (out x (call random_crop {JPEG} 8 8 7))) default none RANGE)")));
// The random map's draws are keyed by position among the elements it receives, which do
// not include the inner map's failures.
rewrites!(a_random_map_does_not_fuse_with_a_map_that_can_fail, fusion::rules(),
    random_crop_over(&s("(map (exprs keep (out y (/ 10 (col value)))) default none RANGE)"))
        => not s(&format!("(map (exprs keep (out y (/ 10 (col value))) (out x (call random_crop {JPEG} 8 8 7))) default none RANGE)")));

//! The JSON form of plans.
//!
//! A document is `{"flumen_plan": 1, "nodes": [...], "output": ID}`. Each node is an object
//! with `id`, the operator's fields (tagged by `"op"`; sources also by `"source"`) and
//! `inputs` (ids of earlier nodes). Nodes come inputs first, so a shared sub-plan appears once.
//! Specs of inner nodes are not stored: they are recomputed, and so re-checked, on load.
//! Closures and generators appear by registry name; a plan holding an anonymous one cannot
//! be serialized.
//!
//! The vocabulary is the one `explain`, specs and error messages use: operators by their
//! tf.data names (`padded_batch`), file formats by [`crate::FileFormat::name`] (`tfrecord`,
//! `text_lines`, `ipc_file`), dtypes by [`crate::DType::name`] (`int64`, `uint8`, `float32`,
//! `string`, `bytes`), functions by [`crate::Func::name`]. Documents written before these
//! were unified spelled some of them differently (`u_int8`, `utf8`, `binary`, `tf_record`);
//! those still read, and are written back in the names above. A plan's fingerprint is over
//! the document as written now, so a snapshot keyed by an earlier spelling is not found
//! again: it is written afresh under the new key.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::function::{DatasetFn, MapFn, Predicate};
use crate::op::Op;
use crate::plan::Plan;
use crate::source::SourceDesc;

/// The format version written into every document.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct NodeDoc {
    id: usize,
    #[serde(flatten)]
    op: Op,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<usize>,
}

#[derive(Serialize, Deserialize)]
struct PlanDoc {
    flumen_plan: u32,
    nodes: Vec<NodeDoc>,
    output: usize,
}

/// The name of an anonymous closure or generator in `op`, if there is one.
fn anonymous_in(op: &Op) -> Option<&str> {
    match op {
        Op::Source(SourceDesc::Generator { name, anonymous: true, .. }) => Some(name),
        Op::Map { func: MapFn::Closure { closure, .. }, .. }
        | Op::MapAndBatch { func: MapFn::Closure { closure, .. }, .. }
        | Op::Filter { predicate: Predicate::Closure { closure }, .. }
        | Op::TakeWhile { predicate: Predicate::Closure { closure } }
        | Op::FlatMap { func: DatasetFn::Closure { closure, .. } }
        | Op::Interleave { func: DatasetFn::Closure { closure, .. }, .. }
            if closure.anonymous =>
        {
            Some(&closure.name)
        }
        _ => None,
    }
}

fn document(plan: &Plan, transform: &dyn Fn(&Op) -> Result<Op>) -> Result<PlanDoc> {
    let nodes = plan.nodes_topological();
    let ids: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, n)| (n.node_id(), i)).collect();
    let docs = nodes
        .iter()
        .enumerate()
        .map(|(id, n)| {
            Ok(NodeDoc { id, op: transform(n.op())?, inputs: n.inputs().iter().map(|i| ids[&i.node_id()]).collect() })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PlanDoc { flumen_plan: FORMAT_VERSION, output: docs.len() - 1, nodes: docs })
}

/// The plan as pretty-printed JSON; fails when it holds an anonymous closure or generator.
pub fn serialize(plan: &Plan) -> Result<String> {
    let doc = document(plan, &|op| match anonymous_in(op) {
        Some(name) => Err(Error::Serde(format!(
            "{} uses the unregistered closure '{name}': register it under a name to serialize the plan",
            op.name()
        ))),
        None => Ok(op.clone()),
    })?;
    serde_json::to_string_pretty(&doc).map_err(|e| Error::Serde(e.to_string()))
}

/// The compact JSON used for fingerprints: anonymous closures allowed, seeds optional, and
/// closure names without their instance number ([`crate::function::ClosureRef::name`]'s part from its last
/// `#`): a pipeline built again, its functions registered again under new numbers, has the
/// fingerprint it had, so its checkpoints restore.
pub(crate) fn canonical(plan: &Plan, keep_seeds: bool) -> String {
    let doc = document(plan, &|op| {
        let mut op = if keep_seeds { op.clone() } else { op.without_seeds() };
        if let Some(closure) = op.closure_mut() {
            if let Some((base, _)) = closure.name.rsplit_once('#') {
                closure.name = base.to_string();
            }
        }
        Ok(op)
    })
    .expect("canonical form never fails");
    serde_json::to_string(&doc).expect("plans always encode")
}

/// The plan described by a JSON document made by [`serialize`]; every node is type-checked.
pub fn deserialize(json: &str) -> Result<Plan> {
    let doc: PlanDoc = serde_json::from_str(json).map_err(|e| Error::Serde(format!("not a flumen plan: {e}")))?;
    if doc.flumen_plan != FORMAT_VERSION {
        return Err(Error::Serde(format!(
            "plan format version {} is not supported (this build reads {FORMAT_VERSION})",
            doc.flumen_plan
        )));
    }
    let mut built: HashMap<usize, Plan> = HashMap::new();
    for node in doc.nodes {
        let inputs = node
            .inputs
            .iter()
            .map(|i| {
                built.get(i).cloned().ok_or_else(|| {
                    Error::Serde(format!("node {} uses node {i}, which is not defined before it", node.id))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let plan = Plan::new(node.op, inputs).map_err(|e| Error::Serde(format!("node {}: {e}", node.id)))?;
        if built.insert(node.id, plan).is_some() {
            return Err(Error::Serde(format!("node id {} is defined twice", node.id)));
        }
    }
    built.remove(&doc.output).ok_or_else(|| Error::Serde(format!("output node {} is not defined", doc.output)))
}

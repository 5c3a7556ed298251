//! Pipelines on a cluster: split by hash slot, sent at once, answers put back in
//! order.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Arg, Cmd, Pipeline, RedisError, Value};

use super::breaker::{Breaker, unreachable};
use super::cluster::ClusterHandle;
use super::within;
use crate::error::FailingFast;

/// One slot's share of a split pipeline: its commands, in order, and where their
/// answers go in the whole pipeline's answer.
pub(super) struct Part {
    pub(super) pipeline: Pipeline,
    pub(super) positions: Vec<usize>,
}

/// The parts of a pipeline whose commands span more than one slot, or `None` when
/// it can go as it is. Keyless commands (`TIME`) go with the first part.
pub(super) fn split_by_slot(pipeline: &Pipeline) -> Option<Vec<Part>> {
    let slots: Vec<Option<Slot>> = pipeline
        .cmd_iter()
        .map(|cmd| first_key(cmd).map(Slot::for_key))
        .collect();
    let first = slots.iter().flatten().next().copied();
    if slots.iter().flatten().all(|slot| Some(*slot) == first) {
        return None;
    }
    let mut order: Vec<Option<Slot>> = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    for (position, (cmd, slot)) in pipeline.cmd_iter().zip(&slots).enumerate() {
        let slot = slot.or(first);
        let index = match order.iter().position(|s| *s == slot) {
            Some(index) => index,
            None => {
                order.push(slot);
                parts.push(Part {
                    pipeline: redis::pipe(),
                    positions: Vec::new(),
                });
                parts.len() - 1
            }
        };
        parts[index].pipeline.add_command(cmd.clone());
        parts[index].positions.push(position);
    }
    Some(parts)
}

/// Sends the parts at once and puts their answers back in pipeline order. Each
/// node the parts go to is asked once through its breaker and learns from its
/// own parts' answers: a budget missed on one node is that node's, not the
/// first key's. A part whose node fails fast fails the pipeline before anything
/// is sent, unless `every_node` (a read that must reach each node: the health
/// check), where the other nodes' parts are sent all the same, so that each
/// node is asked and charged by its own answer. The pipeline answers when its
/// slowest part does, each within the budget, even where another part failed
/// at once. (The sessions' count over every shard is the health check's look
/// at every primary: charged to its first key's node alone, it opened that
/// node's breaker and never a stalled node's; sent to no node once one failed
/// fast, it left a stalled node whose breaker lagged the others' unasked, and
/// closed, for good.)
pub(super) async fn run_parts(
    handle: &ClusterHandle,
    conn: &ClusterConnection,
    budget: Option<Duration>,
    every_node: bool,
    parts: Vec<Part>,
    count: usize,
) -> Result<Vec<Value>, RedisError> {
    // Each part's node (none until the slot map is known), each node once.
    let mut nodes: Vec<Arc<Breaker>> = Vec::new();
    let node_of: Vec<Option<usize>> = parts
        .iter()
        .map(|part| {
            let breaker = part
                .pipeline
                .cmd_iter()
                .find_map(first_key)
                .and_then(|key| handle.breaker_of(key, conn))?;
            Some(match nodes.iter().position(|n| Arc::ptr_eq(n, &breaker)) {
                Some(index) => index,
                None => {
                    nodes.push(breaker);
                    nodes.len() - 1
                }
            })
        })
        .collect();
    let mut admitted = Vec::with_capacity(nodes.len());
    let admissions =
        futures::future::join_all(nodes.iter().map(|node| node.admit_checked(budget))).await;
    for admission in admissions {
        match admission {
            Ok(node) => admitted.push(Some(node)),
            Err(fast) if !every_node => return Err(fast),
            Err(_) => admitted.push(None),
        }
    }
    // Which parts fail at once: their node fails fast.
    let fast: Vec<bool> = node_of
        .iter()
        .map(|node| node.is_some_and(|n| admitted[n].is_none()))
        .collect();
    let mut answers = futures::future::join_all(parts.iter().zip(&fast).map(|(part, &fast)| {
        let mut conn = conn.clone();
        within(budget, async move {
            if fast {
                return Err(FailingFast::redis_error());
            }
            conn.req_packed_commands(&part.pipeline, 0, part.positions.len())
                .await
        })
    }))
    .await;
    // Where a node's parts (or the pipeline's) failed in different ways, the
    // error that says the node did not answer is the one that counts: a
    // probe must not close a breaker on an error another node's part answered
    // with, nor a missed budget go unseen by the connection's rebuild.
    for (index, admitted) in admitted.into_iter().enumerate() {
        let Some(admitted) = admitted else { continue };
        let errors = || {
            node_of
                .iter()
                .zip(&answers)
                .filter(move |(node, _)| **node == Some(index))
                .filter_map(|(_, answer)| answer.as_ref().err())
        };
        admitted.record(
            errors()
                .find(|e| unreachable(e))
                .or_else(|| errors().next()),
        );
    }
    // A part that was sent says more than one that failed at once.
    let sent = |at: &usize| !fast[*at];
    let errored = |at: &usize| answers[*at].is_err();
    let failed = (0..answers.len())
        .filter(sent)
        .find(|at| answers[*at].as_ref().is_err_and(unreachable))
        .or_else(|| (0..answers.len()).filter(sent).find(errored))
        .or_else(|| (0..answers.len()).find(errored));
    if let Some(Err(error)) = failed.map(|at| answers.swap_remove(at)) {
        return Err(error);
    }
    let mut out = vec![Value::Nil; count];
    for (part, values) in parts.iter().zip(answers.into_iter().flatten()) {
        for (position, value) in part.positions.iter().zip(values) {
            out[*position] = value;
        }
    }
    Ok(out)
}

/// The key a command is routed by: its first key (after the script and key count
/// for `EVAL`/`EVALSHA`), none for the keyless commands the shop sends.
pub(super) fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()?;
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("EVALSHA") || is("EVAL") || is("EVALSHA_RO") || is("EVAL_RO") || is("FCALL") {
        let _script = args.next()?;
        let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
        return if keys == 0 { None } else { args.next() };
    }
    if [
        "TIME", "PING", "INFO", "SCRIPT", "DBSIZE", "CLUSTER", "CONFIG",
    ]
    .iter()
    .any(|n| is(n))
    {
        return None;
    }
    args.next()
}

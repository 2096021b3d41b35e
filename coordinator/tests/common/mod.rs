//! Helpers shared by the coordinator's tests: picking batches, replies, events and membership
//! changes out of the state machine's outputs.
#![allow(dead_code)] // each test crate uses its own subset

use coordinator::{ClientId, Event, Output};
use wire::channel::CoordinatorToNode;
use wire::messages::{Batch, ClientReply, NodeId, PartitionId};

pub fn batches(out: &[Output]) -> Vec<(Vec<NodeId>, Batch)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::Batch(b) } => Some((nodes.clone(), b.clone())),
            _ => None,
        })
        .collect()
}

pub fn replies(out: &[Output]) -> Vec<(ClientId, ClientReply)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Reply { client, reply } => Some((*client, reply.clone())),
            _ => None,
        })
        .collect()
}

pub fn events(out: &[Output]) -> Vec<Event> {
    out.iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// The memberships of `partition` sent: to which nodes, naming which replicas live.
pub fn memberships(out: &[Output], partition: PartitionId) -> Vec<(Vec<NodeId>, Vec<NodeId>)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::Membership { partition: p, live, .. } }
                if *p == partition =>
            {
                Some((nodes.clone(), live.clone()))
            }
            _ => None,
        })
        .collect()
}

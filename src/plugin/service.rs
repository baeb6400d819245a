//! The state every thread of a serving plugin shares: the tools, the manifest, the limits,
//! the connection to the host, and the accounting of the dispatch side.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::value::RawValue;

use crate::spin;
use crate::writer::Outbox;

use super::events::Notifier;
use super::health::Health;
use super::job::{InvokeJob, Job};
use super::options::Options;
use super::pool::Pool;
use super::reverse::Peer;
use super::reverse::pending::Pending;
use super::session::Session;
use super::tool::Tool;

pub(crate) type HealthHook = Box<dyn Fn() -> Health + Send + Sync>;

/// Everything the threads share.
pub(crate) struct Service {
    pub name: String,
    pub version: String,
    pub manifest_json: Box<RawValue>,
    pub tools: Vec<Tool>,
    pub uses: Vec<&'static str>,
    pub health: Option<HealthHook>,
    pub opts: Options,
    pub peer: Arc<Peer>,
    pub accepting: AtomicBool,
    pub pool: Pool<InvokeJob>,
    pub events: Notifier,
    pub jobs: Receiver<Job>,
    /// How long idle threads poll their queue before sleeping (see `spin`).
    pub spin: Duration,
}

/// The parts of a plugin the runtime needs.
pub(crate) struct Parts {
    pub name: String,
    pub version: String,
    pub manifest_json: Box<RawValue>,
    pub tools: Vec<Tool>,
    pub capabilities: Vec<String>,
    pub uses: Vec<&'static str>,
    pub health: Option<HealthHook>,
    pub opts: Options,
}

impl Service {
    pub(crate) fn new(parts: Parts, out: Outbox, events: Notifier, jobs: Receiver<Job>) -> Service {
        let spin = spin::effective(parts.opts.spin);
        let peer = Arc::new(Peer {
            out,
            pending: Pending::new("ex-"),
            session: Session::default(),
            capabilities: parts.capabilities,
        });
        Service {
            name: parts.name,
            version: parts.version,
            manifest_json: parts.manifest_json,
            pool: Pool::new(parts.opts.max_concurrent_invokes),
            tools: parts.tools,
            uses: parts.uses,
            health: parts.health,
            opts: parts.opts,
            peer,
            accepting: AtomicBool::new(true),
            events,
            jobs,
            spin,
        }
    }

    /// The index of a tool by name. Plugins have a handful of tools, so a linear scan of
    /// short strings is as fast as hashing and keeps the binary small.
    pub(crate) fn tool_index(&self, name: &str) -> Option<usize> {
        self.tools.iter().position(|t| t.spec.name == name)
    }
}

//! The state every thread of a serving plugin shares: the tools, the manifest, the limits,
//! the connection to the host, and the accounting of the dispatch side.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::value::RawValue;

use crate::spin;

use super::events::Notifier;
use super::health::Health;
use super::intake::Intake;
use super::job::{InvokeJob, Job};
use super::options::Options;
use super::output::Output;
use super::pool::Pool;
use super::relay::Relay;
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
    pub pool: Pool<InvokeJob>,
    /// The request queue's byte budget, the reader's wake-ups and the line buffers.
    pub intake: Intake,
    pub events: Notifier,
    pub jobs: Receiver<Job>,
    /// The longest the dispatch and writer threads poll before sleeping (see
    /// `spin::Poller`); zero where only one CPU is usable.
    pub poll: Duration,
    /// Set by the writer thread when it has flushed and stopped.
    pub writer_done: AtomicBool,
    /// Where the reader parks its reading while it runs an invoke itself.
    pub relay: Arc<Relay>,
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
    pub(crate) fn new(parts: Parts, out: Output, events: Notifier, jobs: Receiver<Job>) -> Service {
        let poll = spin::effective(parts.opts.spin);
        let intake = Intake::new();
        let relay = Arc::new(Relay::new(parts.opts.inline, events.ringer()));
        let peer = Arc::new(Peer {
            out,
            pending: Pending::new("ex-", Some(intake.waker()), Some(relay.clone())),
            relay: relay.clone(),
            session: Session::default(),
            capabilities: parts.capabilities,
            #[cfg(feature = "mcp")]
            mcp: Default::default(),
        });
        Service {
            name: parts.name,
            version: parts.version,
            manifest_json: parts.manifest_json,
            pool: Pool::new(parts.opts.max_concurrent_invokes, Some(intake.waker())),
            tools: parts.tools,
            uses: parts.uses,
            health: parts.health,
            opts: parts.opts,
            peer,
            intake,
            events,
            jobs,
            poll,
            writer_done: AtomicBool::new(false),
            relay,
        }
    }

    /// Whether the reader may try to run an invoke itself: it may at all (a timer bounds
    /// its runs, `relay.rs`), and no handler waits on the host (the reader must keep
    /// reading for its answer).
    pub(crate) fn may_inline(&self) -> bool {
        self.relay.enabled() && self.peer.pending.len() == 0
    }
}

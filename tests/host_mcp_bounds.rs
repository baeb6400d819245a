//! The host's bounds on an MCP server's `tools/list` (issue 36): a list past its total
//! bytes, its tool count or the memory its manifest would take is refused with an error
//! naming the cap, and the host's heap while it reads stays within a few times what it
//! read. The server is `tests/mcp/big_tools_server.py`, which streams its pages so that
//! it stays small itself; the heap is the host's, counted by this binary's allocator.
// Unix only: drives a Python server, which a Windows test process under Wine cannot start.
#![cfg(all(unix, feature = "host"))]

mod host_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use executa::Error;
use executa::host::{Handlers, PluginCommand, PluginProcess, Protocol};
use host_common::opts;

/// The host's caps, as `src/host/mcp.rs` names them (`MAX_TOOLS_LIST_BYTES`,
/// `MAX_TOOLS_HEAP_BYTES`).
const MAX_TOOLS_LIST_BYTES: usize = 16 * 1024 * 1024;
const MAX_TOOLS_HEAP_BYTES: usize = 64 * 1024 * 1024;
const MIB: usize = 1024 * 1024;

/// Tracks the bytes allocated now and their peak, then defers to the system allocator.
struct Peak;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = NOW.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are atomics and never allocate.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded as received.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as the copy it may be: both blocks at once.
        grew(new_size);
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Peak = Peak;

/// One test at a time: the counters are the whole process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// The heap's growth over what it was at the start, at its peak while `f` ran.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = NOW.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(start))
}

/// `python3 tests/mcp/big_tools_server.py PAGE_MIB PAGES SHAPE`: PAGES pages of about
/// PAGE_MIB MiB each.
fn server(page_mib: &str, pages: &str, shape: &str) -> PluginCommand {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/big_tools_server.py");
    PluginCommand::new("python3").args([script, page_mib, pages, shape])
}

/// The server started and its `initialize` done; `None` (with a message) where python3 is
/// missing.
fn start(cmd: PluginCommand) -> Option<PluginProcess> {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: python3 is not installed");
        return None;
    }
    let options = executa::host::HostOptions {
        protocol: Protocol::Mcp,
        ..opts()
    };
    let process = PluginProcess::spawn(&cmd, options, Handlers::new()).expect("spawns");
    process.initialize().expect("the server answers initialize");
    Some(process)
}

/// `describe`'s refusal, its message, and the heap's peak growth meanwhile; the server is
/// still served afterwards (`ping` answered).
fn refusal(process: &PluginProcess) -> (String, usize) {
    let (answer, growth) = peak_growth(|| process.describe());
    let why = match answer {
        Err(Error::Protocol(why)) => why,
        Err(e) => panic!("expected a protocol error naming a cap, got: {e}"),
        Ok(m) => panic!(
            "expected a refusal, got a manifest of {} tools",
            m.tools.len()
        ),
    };
    eprintln!(
        "refused after heap peak growth {:.1} MiB: {why}",
        growth as f64 / MIB as f64
    );
    let health = process
        .health()
        .expect("the server still answers after the refusal");
    assert_eq!(health.status, "ready");
    (why, growth)
}

/// The hostile finding: 100 pages of 15 MiB offered (before: 628 MB resident for the
/// first, aborted at 4.46 GB). The first page's tools would take more than the heap cap
/// as trees: refused by name, having held only the page and a few copies of it.
#[test]
fn pages_of_large_schemas_are_refused_at_a_few_times_a_page() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("15", "100", "wide")) else {
        return;
    };
    let (why, growth) = refusal(&process);
    assert!(why.contains("MAX_TOOLS_HEAP_BYTES"), "{why}");
    assert!(
        growth < 4 * 15 * MIB,
        "the heap grew {} MiB reading a 15 MiB page",
        growth / MIB
    );
    process.shutdown();
}

/// Small schemas (`{"type":"integer"}` each) are the costliest text per byte as a tree:
/// a 15 MiB page would be 1.8 GB of trees. Refused from the estimate, before any tree.
#[test]
fn a_page_of_many_small_schemas_is_refused_before_it_becomes_trees() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("15", "1", "dense")) else {
        return;
    };
    let (why, growth) = refusal(&process);
    assert!(why.contains("MAX_TOOLS_HEAP_BYTES"), "{why}");
    assert!(growth < 4 * 15 * MIB, "the heap grew {} MiB", growth / MIB);
    process.shutdown();
}

/// Pages whose trees are cheap (long descriptions) are bounded by their bytes: the page
/// that passes the total is the last one read, and the error names the cap.
#[test]
fn pages_past_the_total_bytes_are_refused_by_name() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("7", "100", "long")) else {
        return;
    };
    let (why, growth) = refusal(&process);
    assert!(
        why.contains("MAX_TOOLS_LIST_BYTES") && why.contains("3 pages"),
        "{why}"
    );
    assert!(
        growth < 3 * MAX_TOOLS_LIST_BYTES,
        "the heap grew {} MiB",
        growth / MIB
    );
    process.shutdown();
}

/// A 300-byte schema whose object refers to itself ten times would expand into 10^8
/// nested parameters (before: aborted past 4 GB): refused once the expansion passes the
/// heap cap.
#[test]
fn a_schema_that_refers_to_itself_is_refused_not_expanded() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("0.0001", "1", "refs")) else {
        return;
    };
    let (why, growth) = refusal(&process);
    assert!(why.contains("MAX_TOOLS_HEAP_BYTES"), "{why}");
    assert!(
        growth < MAX_TOOLS_HEAP_BYTES,
        "the heap grew {} MiB",
        growth / MIB
    );
    process.shutdown();
}

#[test]
fn more_tools_than_the_cap_are_refused_by_name() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("0.15", "3", "tiny")) else {
        return;
    };
    let (why, _) = refusal(&process);
    assert!(why.contains("MAX_TOOLS") && why.contains("tools"), "{why}");
    process.shutdown();
}

/// A list within the caps is read whole, across pages, as before: every tool, its
/// parameters from its schema, the schema kept in `extra`; and what the manifest keeps
/// stays within the heap cap.
#[test]
fn a_list_within_the_caps_is_read_whole_across_pages() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(process) = start(server("0.5", "3", "wide")) else {
        return;
    };
    let before = NOW.load(Ordering::Relaxed);
    let manifest = process.describe().expect("a manifest");
    let kept = NOW.load(Ordering::Relaxed).saturating_sub(before);
    assert!(
        kept < MAX_TOOLS_HEAP_BYTES,
        "the manifest keeps {} MiB",
        kept / MIB
    );
    let per_page = manifest.tools.len() / 3;
    assert!(per_page > 10, "{} tools", manifest.tools.len());
    for (i, page) in ["tool_0_", "tool_1_", "tool_2_"].iter().enumerate() {
        let tool = &manifest.tools[i * per_page];
        assert!(
            tool.name.starts_with(page),
            "{} is not of page {i}",
            tool.name
        );
    }
    let tool = &manifest.tools[0];
    assert_eq!(tool.description, "A tool with a large schema.");
    assert_eq!(tool.parameters.as_array().map(Vec::len), Some(200));
    assert_eq!(tool.extra["inputSchema"]["required"][0], "field_0");
    process.shutdown();
}

/// A page of millions of tiny "tools" (`[0,0,...]`, 16 MB) is refused as it is counted,
/// before a list of them is made: that list alone would be 128 MiB, twice the heap cap
/// (the count was checked only after the list was made).
#[test]
fn a_page_of_millions_of_tiny_tools_is_refused_before_it_is_listed() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let text = format!("{{\"tools\":[{}0]}}", "0,".repeat(8 * MIB - 1));
    let page = serde_json::value::RawValue::from_string(text).expect("JSON");
    let (taken, growth) = peak_growth(|| executa::host::McpToolsPager::default().take(&page));
    let why = taken.expect_err("refused").to_string();
    assert!(why.contains("MAX_TOOLS"), "{why}");
    assert!(growth < 2 * MIB, "{growth} bytes of heap to refuse it");
}

//! Review of quick services answered on the host's reader thread: the reader runs code of
//! the host author's services (`handles`, `is_quick`) for every reverse call now, so a
//! panic there must cost one call its answer (-32603), never the reader.
// Unix only: drives Python fixtures, which a Windows test process under Wine cannot start.
#![cfg(unix)]

mod host_common;

use std::sync::Arc;
use std::time::Duration;

use executa::RpcError;
use executa::host::{Handlers, Host, HostOptions, ReverseCall, Service};
use host_common::{opts, py};
use serde_json::{Value, json};

/// A quick service with a bug in `handles` for one method.
struct PanicsInHandles;

impl Service for PanicsInHandles {
    fn handles(&self, method: &str) -> bool {
        assert_ne!(method, "test/boom", "a bug in handles");
        method == "test/fine"
    }
    fn call(&self, _: &ReverseCall) -> Result<Value, RpcError> {
        Ok(json!("fine"))
    }
    fn is_quick(&self) -> bool {
        true
    }
}

#[test]
fn a_panic_in_a_services_handles_fails_that_call_and_spares_the_reader() {
    let o = HostOptions {
        // Bounds the failure of the unfixed code: with the reader dead, replies are
        // never settled and invokes end at this timeout.
        invoke_timeout: Duration::from_secs(15),
        ..opts()
    };
    let handlers = Handlers::new().service(Arc::new(PanicsInHandles));
    let host = Host::start(py("tools_plugin.py", &[]), o, handlers).expect("start");
    let reverse = |method: &str| {
        host.invoke("reverse", &json!({"method": method, "params": {}}))
            .expect("the invoke is answered")
    };
    let boom = reverse("test/boom");
    assert!(!boom.success, "{boom:?}");
    assert_eq!(boom.details.as_ref().unwrap()["code"], -32603, "{boom:?}");
    let fine = reverse("test/fine");
    assert_eq!(fine.data["result"], "fine", "{fine:?}");
}

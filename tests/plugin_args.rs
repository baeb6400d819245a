//! Parameters declared once (`args!` + `Tool::typed`), defaults applied, -32602 naming the
//! full path, and the start-up check (manifest lint, hand-written list vs args type).

mod common;

use std::process::{Command, Stdio};

use common::{Conn, example_bin};
use executa::{Error, Invocation, Param, Plugin, Tool, ToolError};
use serde_json::{Value, json};

executa::args! {
    /// Where to ship.
    struct Address {
        /// Street and number
        street: Option<String>,
        /// City name
        city: String,
        /// Country code
        country: String = "DE",
    }

    enum Speed { Normal = "normal", Express = "express" }

    /// One order line.
    struct Line {
        /// Article number
        sku: String,
        /// How many
        qty: u32 = 1,
    }

    /// The `order` tool's arguments.
    #[serde(deny_unknown_fields)]
    struct OrderArgs {
        /// Delivery address
        address: Address,
        /// The lines
        items: Vec<Line>,
        /// Shipping speed
        speed: Speed = Speed::Normal,
        /// Priority, 1-9
        priority: u8 = 5,
        /// Gift note
        note: Option<String>,
    }
}

fn order(a: OrderArgs, _: &Invocation) -> Result<Value, ToolError> {
    let speed = match a.speed {
        Speed::Normal => "normal",
        Speed::Express => "express",
    };
    let items: Vec<Value> = a
        .items
        .iter()
        .map(|l| json!({ "sku": l.sku, "qty": l.qty }))
        .collect();
    Ok(json!({
        "street": a.address.street, "city": a.address.city, "country": a.address.country,
        "items": items, "speed": speed, "priority": a.priority, "note": a.note,
    }))
}

fn shop() -> Plugin {
    Plugin::new("shop", "0.1.0")
        .description("Takes orders")
        .tool(Tool::typed("order", "Places an order", order))
}

#[test]
fn the_manifest_comes_from_the_args_type() {
    let mut p = Conn::serve(shop());
    p.request(1, "describe", None);
    let m = p.recv_until_id("1").0.result().clone();
    let params = &m["tools"][0]["parameters"];
    assert_eq!(
        params[0],
        json!({"name": "address", "type": "object", "description": "Delivery address",
               "required": true, "properties": [
                   {"name": "street", "type": "string", "description": "Street and number", "required": false},
                   {"name": "city", "type": "string", "description": "City name", "required": true},
                   {"name": "country", "type": "string", "description": "Country code",
                    "required": false, "default": "DE"}]})
    );
    assert_eq!(params[1]["type"], "array");
    assert_eq!(params[1]["items"]["type"], "object");
    assert_eq!(params[1]["items"]["properties"][1]["default"], 1);
    assert_eq!(params[2]["enum"], json!(["normal", "express"]));
    assert_eq!(params[2]["default"], "normal");
    assert_eq!(params[3]["default"], 5);
    assert_eq!(params[3]["required"], false);
    assert_eq!(params[4]["required"], false);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn defaults_are_applied_at_every_level() {
    let mut p = Conn::serve(shop());
    p.invoke(
        1,
        "order",
        json!({"address": {"city": "Bonn"}, "items": [{"sku": "a"}, {"sku": "b", "qty": 3}]}),
    );
    let reply = p.recv_until_id("1").0;
    assert_eq!(
        reply.data(),
        &json!({"street": null, "city": "Bonn", "country": "DE",
                "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 3}],
                "speed": "normal", "priority": 5, "note": null})
    );
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn a_hand_written_default_reaches_the_handler() {
    #[derive(serde::Deserialize)]
    struct Args {
        priority: u8,
    }
    let plugin = Plugin::new("manual", "0.1.0").description("d").tool(
        Tool::new("t", "d", |a: Args, _: &Invocation| {
            Ok::<_, ToolError>(json!({ "priority": a.priority }))
        })
        .param(Param::integer("priority", "p").default_value(5)),
    );
    let mut p = Conn::serve(plugin);
    p.invoke(1, "t", json!({}));
    assert_eq!(p.recv_until_id("1").0.data(), &json!({"priority": 5}));
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn invalid_arguments_name_the_full_path() {
    let mut p = Conn::serve(shop());
    let cases = [
        (
            json!({"address": {"street": "x"}, "items": []}),
            "address.city",
        ),
        (
            json!({"address": {"city": "a"}, "items": [{"sku": "a"}, {"sku": "b"}, {"sku": "c", "qty": -2}]}),
            "items[2].qty",
        ),
        (
            json!({"address": {"city": "a"}, "items": [], "priority": 300}),
            "priority",
        ),
        (
            json!({"address": {"city": "a"}, "items": [], "speed": "warp"}),
            "speed",
        ),
        (
            json!({"address": {"city": "a"}, "items": [], "colour": "red"}),
            "colour",
        ),
        (json!({"address": {"city": 7}, "items": []}), "address.city"),
    ];
    for (i, (args, path)) in cases.iter().enumerate() {
        let id = (i + 1).to_string();
        p.invoke(i + 1, "order", args.clone());
        let reply = p.recv_until_id(&id).0;
        assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
        let msg = reply.error_message();
        assert!(
            msg.starts_with(&format!("invalid arguments: `{path}`: ")),
            "{args}: {msg}"
        );
        assert!(!msg.contains(" at line "), "{msg}");
        assert_eq!(reply.error()["data"]["path"], json!(path), "{}", reply.raw);
    }
    p.close_stdin();
    p.wait_stopped();
}

/// Why `plugin` refuses to start.
fn refusal(plugin: Plugin) -> Vec<String> {
    let err = plugin.serve(std::io::empty(), std::io::sink());
    let Err(Error::InvalidPlugin(problems)) = err else {
        panic!("expected InvalidPlugin, got {err:?}");
    };
    problems
}

#[test]
fn a_hand_list_that_disagrees_with_the_args_type_refuses_to_start() {
    let plugin = Plugin::new("shop", "0.1.0").description("d").tool(
        Tool::typed("order", "d", order)
            .param(Param::object("address", "a"))
            .param(Param::array("items", executa::ParamType::Object, "i"))
            .param(Param::string("speed", "s").default_value("express"))
            .param(Param::integer("priority", "p"))
            .param(Param::integer("quantity", "q").optional()),
    );
    let problems = refusal(plugin);
    assert_eq!(
        problems,
        vec![
            "tool `order`: parameter `speed` has default \"express\" in .param(...) but \"normal\" in the args type",
            "tool `order`: parameter `priority` is required in .param(...) but optional in the args type",
            "tool `order`: parameter `priority` has default none in .param(...) but 5 in the args type",
            "tool `order`: field `note` of the args type is missing from the .param(...) list",
            "tool `order`: parameter `quantity` in .param(...) is not a field of the args type",
        ]
    );
}

#[test]
fn a_typed_tool_without_parameters_refuses_to_start_naming_each_field() {
    // The README's old reverse-call example: a plain serde struct and no parameter list,
    // so the manifest said `"parameters": []` while `text` was required.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Plain {
        text: String,
        #[serde(rename = "maxWords")]
        max_words: Option<u32>,
        #[serde(skip)]
        internal: u8,
    }
    let summarize = |_: Plain, _: &Invocation| Ok::<_, ToolError>(json!({}));
    let plugin =
        Plugin::new("s", "0.1.0")
            .description("d")
            .tool(Tool::new("summarize", "d", summarize));
    let problems = refusal(plugin);
    assert_eq!(
        problems,
        vec![
            "tool `summarize`: field `text` of its args type is not published: declare the type \
             with `args!` and use `Tool::typed`, or add `.param(...)`",
            "tool `summarize`: field `maxWords` of its args type is not published: declare the \
             type with `args!` and use `Tool::typed`, or add `.param(...)`",
        ]
    );
    // Declared by hand, the same type starts; so do free-form and argument-less tools.
    let plugin = Plugin::new("s", "0.1.0").description("d").tool(
        Tool::new("summarize", "d", summarize)
            .param(Param::string("text", "t"))
            .param(Param::integer("maxWords", "m").optional()),
    );
    let free = |_: Value, _: &Invocation| Ok::<_, ToolError>(json!({}));
    let none = |_: serde::de::IgnoredAny, _: &Invocation| Ok::<_, ToolError>(json!({}));
    let plugin = plugin
        .tool(Tool::new("free", "d", free))
        .tool(Tool::new("none", "d", none));
    assert!(plugin.serve(std::io::empty(), std::io::sink()).is_ok());
}

#[test]
fn a_manifest_the_platform_rejects_refuses_to_start_once_per_problem() {
    let nothing = |_: serde::de::IgnoredAny, _: &Invocation| Ok::<_, ToolError>(json!({}));
    let plugin = Plugin::new("bad", "1.0")
        .description("d")
        .capability("storage.user")
        .tool(
            Tool::new("a", "d", nothing)
                .param(Param::string("x", "x"))
                .param(Param::string("x", "again")),
        )
        .tool(Tool::new("a", "d", nothing));
    let problems = refusal(plugin);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    for needle in [
        "`version` \"1.0\" is not SemVer",
        "tool name \"a\" appears more than once",
        "parameter \"x\" is declared twice",
        "unknown capability \"storage.user\"",
    ] {
        assert_eq!(
            problems.iter().filter(|p| p.contains(needle)).count(),
            1,
            "{needle}: {problems:#?}"
        );
    }
}

#[test]
fn the_binary_exits_2_naming_each_problem_also_for_describe() {
    let bin = example_bin("misdeclared");
    for args in [&["--describe"][..], &[][..]] {
        let out = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run misdeclared");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing on stdout: {:?}", out.stdout);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("executa: invalid plugin definition: "))
            .collect();
        assert_eq!(lines.len(), 7, "{stderr}");
        for needle in [
            "field `quantity` of the args type is missing",
            "tool `note`: field `text` of its args type is not published",
            "\"llm.samples\"; did you mean `llm.sample`?",
            "parameter `qty` in .param(...) is not a field",
            "is not SemVer",
            "appears more than once",
            "\"storage.user\"",
        ] {
            assert_eq!(
                lines.iter().filter(|l| l.contains(needle)).count(),
                1,
                "{needle}: {stderr}"
            );
        }
    }
}

executa::args! {
    /// Where to meet.
    struct Place {
        city: String,
        /// Street and number
        street: Option<String>,
    }

    /// The `visit` tool's arguments.
    struct VisitArgs {
        /// Where to go
        place: Place,
        when: Option<String>,
    }
}

fn visit(a: VisitArgs, _: &Invocation) -> Result<Value, ToolError> {
    Ok(json!({ "city": a.place.city, "street": a.place.street, "when": a.when }))
}

/// The environment variable that makes this test binary the plugin of
/// [`a_field_without_a_doc_comment_is_warned_on_stderr_at_start_up`].
const UNDESCRIBED_CHILD: &str = "EXECUTA_TEST_UNDESCRIBED_PLUGIN";

/// Not a test of its own: the plugin that the test below starts (this test binary, run
/// again with [`UNDESCRIBED_CHILD`] set), so that its start-up is a real process start.
#[test]
fn undescribed_plugin() {
    if std::env::var_os(UNDESCRIBED_CHILD).is_none() {
        return;
    }
    Plugin::new("undescribed", "0.1.0")
        .description("Meets people")
        .tool(Tool::typed("visit", "Plans a visit", visit))
        .run_with_args(std::iter::empty::<&str>())
}

#[test]
fn a_field_without_a_doc_comment_is_warned_on_stderr_at_start_up() {
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([
            "--exact",
            "undescribed_plugin",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UNDESCRIBED_CHILD, "1")
        .env_remove("EXECUTA_LOG")
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(out) => out,
        // An emulated ARM test binary (qemu-user without binfmt_misc, which .ci/cross/arm.sh
        // falls back to) cannot exec itself: ENOEXEC.
        Err(e) if cfg!(target_os = "linux") && e.raw_os_error() == Some(8) => {
            eprintln!("skipped: this test binary cannot start itself here ({e})");
            return;
        }
        Err(e) => panic!("run the plugin: {e}"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A warning: the plugin starts, serves (nothing: stdin is empty) and exits 0.
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warned: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("executa: manifest: ").map(|(_, m)| m))
        .collect();
    let fix = "has no `description` (the model reads it to fill the argument in): add a `///` \
               doc comment to the field, or give its `Param` one (`Param::string(name, description)`)";
    assert_eq!(
        warned,
        [
            format!("tool \"visit\": parameter \"place.city\" {fix}"),
            format!("tool \"visit\": parameter \"when\" {fix}"),
        ],
        "{stderr}"
    );
}

#[test]
fn help_and_version_answer_and_exit_0() {
    let bin = example_bin("hello");
    let run = |arg: &str| {
        Command::new(&bin)
            .arg(arg)
            .stdin(Stdio::null())
            .output()
            .expect("run hello")
    };
    let help = run("--help");
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.starts_with("hello 0.1.0\nGreets people by name\n"),
        "{text}"
    );
    assert!(text.contains("greet"), "{text}");
    assert!(text.contains("Returns a greeting for a person"), "{text}");
    assert!(text.contains("JSON-RPC"), "{text}");
    let version = run("--version");
    assert_eq!(version.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&version.stdout), "hello 0.1.0\n");
}

//! The host against the fixture extensions (real child processes).

use std::path::PathBuf;

use crossbeam_channel::Receiver;
use serde_json::json;

use super::*;

use crate::extensions::ExtensionOrigin;
use crate::extensions::hooks::{InputOutcome, ToolCallOutcome};

const WAIT: Duration = Duration::from_secs(10);

fn fixture(name: &str) -> ExtensionSpec {
    ExtensionSpec {
        path: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/extensions")
            .join(name),
        origin: ExtensionOrigin::Cli,
    }
}

fn handshake() -> Handshake {
    Handshake {
        cwd: env!("CARGO_MANIFEST_DIR").into(),
        session_id: "test-session".into(),
        session_file: None,
        flag_values: Map::new(),
    }
}

struct Started {
    host: ExtensionHost,
    errors: Vec<ExtensionError>,
    events: Receiver<ExtensionEvent>,
    /// Pids the extensions announced ("pid <n> [<n>…]" notices), by extension.
    pids: HashMap<usize, Vec<i32>>,
}

fn start(names: &[&str]) -> Started {
    let (tx, events) = crossbeam_channel::unbounded();
    let (host, errors) = ExtensionHost::start(
        names.iter().map(|n| fixture(n)).collect(),
        &handshake(),
        None,
        tx,
        false,
    );
    let mut started = Started {
        host,
        errors,
        events,
        pids: HashMap::new(),
    };
    // Every fixture announces its pid(s) first; collect them (in load order).
    let live = (0..names.len())
        .filter(|i| started.host.is_alive(ExtensionId(*i)))
        .count();
    let mut order = Vec::new();
    while order.len() < live {
        let event = started.next();
        let ExtensionEvent::UiRequest { event: ui } = &event else {
            panic!("expected a pid notice, got {event:?}");
        };
        let record = ui.to_extension_value().unwrap();
        let message = record["message"].as_str().unwrap_or_default();
        let pids: Vec<i32> = message
            .strip_prefix("pid ")
            .unwrap_or_else(|| panic!("not a pid notice: {record}"))
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        order.push(pids);
    }
    // Notices from different extensions may interleave: match them by process group.
    for pids in order {
        let index = (0..names.len())
            .find(|i| {
                started.host.is_alive(ExtensionId(*i))
                    && !started.pids.contains_key(i)
                    && pid_matches(&started, *i, pids[0])
            })
            .unwrap_or_else(|| panic!("no extension has pid {}", pids[0]));
        started.pids.insert(index, pids);
    }
    started
}

/// Whether extension `index`'s process is `pid` (its /proc cmdline names its fixture).
fn pid_matches(started: &Started, index: usize, pid: i32) -> bool {
    let path = started
        .host
        .extension_path(ExtensionId(index))
        .unwrap_or_default();
    let name = std::path::Path::new(path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(&name))
        .unwrap_or(false)
}

impl Started {
    fn next(&self) -> ExtensionEvent {
        self.events
            .recv_timeout(WAIT)
            .expect("no extension event in time")
    }

    /// The next event that is not a UI request of `skip` methods.
    fn next_where(&self, pred: impl Fn(&ExtensionEvent) -> bool) -> ExtensionEvent {
        loop {
            let event = self.next();
            if pred(&event) {
                return event;
            }
        }
    }

    fn hook(&self, kind: HookKind, payload: Value) -> HookOutcome {
        let id = self
            .host
            .start_hook(kind, payload, Duration::from_secs(5))
            .expect("someone handles the hook");
        match self.next() {
            ExtensionEvent::HookResult { id: got, outcome } if got == id => outcome,
            other => panic!("expected the hook result, got {other:?}"),
        }
    }
}

/// Gone, or a zombie (the container's init may not reap orphans).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn assert_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    for pid in pids {
        while !process_gone(*pid) {
            assert!(Instant::now() < deadline, "process {pid} is still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn load_errors_for_modules_non_executables_and_missing_files() {
    let dir = std::env::temp_dir().join(format!("pi-rs-ext-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ext.ts"), "export default () => {}").unwrap();
    std::fs::write(dir.join("plain.sh"), "#!/bin/sh\n").unwrap();
    let specs = ["ext.ts", "plain.sh", "missing.sh"]
        .iter()
        .map(|n| ExtensionSpec {
            path: dir.join(n),
            origin: ExtensionOrigin::Cli,
        })
        .chain([fixture("hello.sh")])
        .collect();
    let (tx, events) = crossbeam_channel::unbounded();
    let (host, errors) = ExtensionHost::start(specs, &handshake(), None, tx, false);
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors.iter().all(|e| e.event == "load"));
    // A module not handed to the TypeScript host (`ts_host::gather`) is refused here.
    assert!(
        errors[0].error.contains("TypeScript host"),
        "{}",
        errors[0].error
    );
    assert!(
        errors[1].error.contains("not an executable"),
        "{}",
        errors[1].error
    );
    assert!(errors[2].error.contains("not found"), "{}", errors[2].error);
    assert_eq!(
        errors[0].event().to_extension_value().unwrap()["extensionPath"],
        dir.join("ext.ts").to_string_lossy().as_ref()
    );
    // The rest goes on: hello.sh runs.
    assert_eq!(host.commands().len(), 1);
    assert!(host.is_alive(ExtensionId(3)));
    assert!(!host.is_alive(ExtensionId(0)));
    host.shutdown(Duration::from_millis(500));
    drop(events);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shell_extension_runs_its_command_and_hears_events() {
    let started = start(&["hello.sh"]);
    assert!(started.errors.is_empty(), "{:?}", started.errors);
    let commands = started.host.commands();
    assert_eq!(commands.len(), 1);
    assert_eq!(
        commands[0].get_commands_item()["sourceInfo"]["source"],
        "cli"
    );
    assert_eq!(commands[0].get_commands_item()["source"], "extension");
    assert!(started.host.run_command("nope", "").is_none());
    let id = started.host.run_command("hello", "Ada").unwrap();
    let ExtensionEvent::UiRequest { event: ui } = started.next() else {
        panic!()
    };
    let record = ui.to_extension_value().unwrap();
    assert_eq!(record["method"], "notify");
    assert_eq!(record["message"], "Hello, Ada!");
    assert_eq!(record["type"], "extension_ui_request");
    assert_eq!(record["id"].as_str().unwrap().len(), 36);
    assert_eq!(
        started.next(),
        ExtensionEvent::CommandFinished {
            id,
            name: "hello".into(),
            error: None
        }
    );
    // Not subscribed: nothing is sent. Subscribed: the status notice follows.
    started.host.notify_event(&json!({"type": "agent_start"}));
    started
        .host
        .notify_event(&json!({"type": "agent_end", "messages": []}));
    let ExtensionEvent::UiRequest { event: ui } = started.next() else {
        panic!()
    };
    let record = ui.to_extension_value().unwrap();
    assert_eq!(record["method"], "setStatus");
    assert_eq!(record["statusText"], "runs: 1");
    let pids = started.pids[&0].clone();
    started.host.shutdown(Duration::from_secs(2));
    assert_gone(&pids);
}

#[test]
fn python_extension_hooks_change_what_happens() {
    let started = start(&["full.py"]);
    assert!(started.errors.is_empty(), "{:?}", started.errors);
    let call = |command: &str| json!({"toolName": "bash", "toolCallId": "call-1", "input": {"command": command}});
    assert_eq!(
        started.hook(HookKind::ToolCall, call("rm -rf /")),
        HookOutcome::ToolCall(ToolCallOutcome::Block {
            reason: "full.py blocks rm -rf".into(),
            terminate: false,
        })
    );
    assert_eq!(
        started.hook(HookKind::ToolCall, call("ls")),
        HookOutcome::ToolCall(ToolCallOutcome::Allow { args: None })
    );
    assert_eq!(
        started.hook(HookKind::ToolCall, call("REWRITE_ME")),
        HookOutcome::ToolCall(ToolCallOutcome::Allow {
            args: Some(json!({"command": "echo rewritten"}))
        })
    );
    // A dialog inside a hook: the confirm reaches the client, its answer decides.
    let id = started
        .host
        .start_hook(
            HookKind::ToolCall,
            call("CONFIRM make"),
            Duration::from_secs(5),
        )
        .unwrap();
    let ExtensionEvent::UiRequest { event: ui } = started.next() else {
        panic!()
    };
    let record = ui.to_extension_value().unwrap();
    assert_eq!(record["method"], "confirm");
    assert_eq!(record["message"], "CONFIRM make");
    let ui_id = record["id"].as_str().unwrap();
    started.host.deliver_ui_response(
        ui_id,
        UiResponse {
            confirmed: Some(true),
            ..UiResponse::default()
        },
    );
    assert_eq!(
        started.next(),
        ExtensionEvent::HookResult {
            id,
            outcome: HookOutcome::ToolCall(ToolCallOutcome::Allow { args: None })
        }
    );
    // A dialog that times out answers with the default (not confirmed).
    let id = started
        .host
        .start_hook(
            HookKind::ToolCall,
            call("CONFIRM FAST"),
            Duration::from_secs(5),
        )
        .unwrap();
    assert!(matches!(started.next(), ExtensionEvent::UiRequest { .. }));
    assert_eq!(
        started.next(),
        ExtensionEvent::HookResult {
            id,
            outcome: HookOutcome::ToolCall(ToolCallOutcome::Block {
                reason: "not confirmed".into(),
                terminate: false,
            })
        }
    );
    let HookOutcome::ToolResult(patch) = started.hook(
        HookKind::ToolResult,
        json!({"toolName":"read","toolCallId":"c","input":{},
               "content":[{"type":"text","text":"the SECRET"}],"isError":false}),
    ) else {
        panic!()
    };
    assert_eq!(patch.details, Some(json!({"redacted": true})));
    assert_eq!(patch.content.map(|c| c.len()), Some(1));
    assert_eq!(
        started.hook(HookKind::Input, json!({"text":"?quick why","source":"rpc"})),
        HookOutcome::Input(InputOutcome::Transform {
            text: "Answer briefly: why".into(),
            images: None
        })
    );
    let id = started
        .host
        .start_hook(HookKind::Input, json!({"text":"ping","source":"rpc"}), WAIT)
        .unwrap();
    let ExtensionEvent::UiRequest { event: ui } = started.next() else {
        panic!()
    };
    let record = ui.to_extension_value().unwrap();
    assert_eq!(record["message"], "pong");
    assert_eq!(
        started.next(),
        ExtensionEvent::HookResult {
            id,
            outcome: HookOutcome::Input(InputOutcome::Handled)
        }
    );
    let HookOutcome::BeforeAgentStart(outcome) = started.hook(
        HookKind::BeforeAgentStart,
        json!({"prompt":"please inject","systemPrompt":"base"}),
    ) else {
        panic!()
    };
    assert_eq!(outcome.system_prompt.as_deref(), Some("base\nBe brief."));
    assert_eq!(outcome.messages[0].custom_type, "full-py");
    let pids = started.pids[&0].clone();
    started.host.shutdown(Duration::from_secs(2));
    assert_gone(&pids);
}

#[test]
fn python_extension_tools_commands_actions_and_dialogs() {
    let started = start(&["full.py"]);
    let tools = started.host.tools();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].spec().name, "word_count");
    assert_eq!(tools[0].extension, ExtensionId(0));
    let flags = &started.host.registration(ExtensionId(0)).unwrap().flags;
    assert_eq!(flags[0].name, "shout");

    started.host.run_tool(
        ExtensionId(0),
        "call-7",
        "word_count",
        &json!({"text": "one two three"}),
    );
    let ExtensionEvent::ToolUpdate { call_id, partial } = started.next() else {
        panic!()
    };
    assert_eq!(call_id, "call-7");
    assert_eq!(partial, ToolOutput::text("counting..."));
    let ExtensionEvent::ToolFinished {
        call_id, output, ..
    } = started.next()
    else {
        panic!()
    };
    assert_eq!(call_id, "call-7");
    assert_eq!(output.content, ToolOutput::text("3 words").content);
    assert_eq!(output.details, Some(json!({"words": 3})));

    let id = started.host.run_command("actions", "now").unwrap();
    let mut actions = Vec::new();
    loop {
        match started.next() {
            ExtensionEvent::Action { extension, action } => {
                assert_eq!(extension, ExtensionId(0));
                actions.push(action);
            }
            ExtensionEvent::CommandFinished {
                id: done, error, ..
            } => {
                assert_eq!(done, id);
                assert_eq!(error, None);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(actions.len(), 5, "{actions:?}");
    assert!(
        matches!(&actions[0], Action::SendUserMessage { content, .. } if content == "Hello from /actions now")
    );
    assert!(matches!(&actions[3], Action::SetSessionName { name } if name == "named by full.py"));

    let id = started.host.run_command("ui", "").unwrap();
    for (method, answer) in [
        ("select", json!("green")),
        ("input", json!("Ada")),
        ("editor", json!("edited")),
    ] {
        let ExtensionEvent::UiRequest { event: ui } = started.next() else {
            panic!()
        };
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["method"], method);
        started.host.deliver_ui_response(
            record["id"].as_str().unwrap(),
            UiResponse {
                value: Some(answer),
                ..UiResponse::default()
            },
        );
    }
    let mut notices = Vec::new();
    let error = loop {
        match started.next() {
            ExtensionEvent::UiRequest { event } => {
                notices.push(event.to_extension_value().unwrap())
            }
            ExtensionEvent::CommandFinished {
                id: done, error, ..
            } if done == id => break error,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(error, None);
    let methods: Vec<&str> = notices
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "notify",
            "setStatus",
            "setWidget",
            "setTitle",
            "set_editor_text"
        ]
    );
    assert_eq!(
        notices[0]["message"],
        "picked green, name Ada, edited edited"
    );

    started.host.run_command("bye", "").unwrap();
    assert!(matches!(
        started.next(),
        ExtensionEvent::Action {
            action: Action::Shutdown,
            ..
        }
    ));
    started.host.shutdown(Duration::from_secs(2));
}

#[test]
fn same_hook_in_two_extensions_chains_and_commands_get_suffixes() {
    let started = start(&["full.py", "full.py"]);
    let names: Vec<String> = started
        .host
        .commands()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        names,
        ["actions:1", "ui:1", "bye:1", "actions:2", "ui:2", "bye:2"]
    );
    // The second extension sees the first one's rewrite and keeps it.
    assert_eq!(
        started.hook(
            HookKind::ToolCall,
            json!({"toolName":"bash","toolCallId":"c","input":{"command":"REWRITE_ME"}})
        ),
        HookOutcome::ToolCall(ToolCallOutcome::Allow {
            args: Some(json!({"command": "echo rewritten"}))
        })
    );
    let HookOutcome::BeforeAgentStart(outcome) = started.hook(
        HookKind::BeforeAgentStart,
        json!({"prompt":"inject","systemPrompt":"base"}),
    ) else {
        panic!()
    };
    assert_eq!(outcome.messages.len(), 2);
    assert_eq!(
        outcome.system_prompt.as_deref(),
        Some("base\nBe brief.\nBe brief.")
    );
    started.host.shutdown(Duration::from_secs(2));
}

#[test]
fn a_hung_extension_misses_its_deadline_and_is_stopped() {
    let started = start(&["hang.sh", "full.py"]);
    let hang_pids = started.pids[&0].clone();
    assert_eq!(hang_pids.len(), 2, "shell and its background sleep");
    let id = started
        .host
        .start_hook(
            HookKind::ToolCall,
            json!({"toolName":"bash","toolCallId":"c","input":{"command":"ls"}}),
            Duration::from_millis(300),
        )
        .unwrap();
    let ExtensionEvent::Error(error) = started.next() else {
        panic!()
    };
    assert_eq!(error.event, "tool_call");
    assert_eq!(error.error, "no answer to tool_call within 300 ms");
    assert!(error.extension_path.ends_with("hang.sh"));
    // Fail-safe: the call is blocked.
    assert_eq!(
        started.next(),
        ExtensionEvent::HookResult {
            id,
            outcome: HookOutcome::ToolCall(ToolCallOutcome::Block {
                reason:
                    "Extension failed, blocking execution: no answer to tool_call within 300 ms"
                        .into(),
                terminate: false,
            })
        }
    );
    assert_eq!(
        started.next(),
        ExtensionEvent::Exited {
            extension: ExtensionId(0)
        }
    );
    assert_gone(&hang_pids);
    assert!(!started.host.is_alive(ExtensionId(0)));
    // The others go on; the next hook no longer waits for the hung one.
    assert_eq!(
        started.hook(HookKind::Input, json!({"text":"hi","source":"rpc"})),
        HookOutcome::Input(InputOutcome::Continue)
    );
    let full_pids = started.pids[&1].clone();
    started.host.shutdown(Duration::from_secs(2));
    assert_gone(&full_pids);
}

#[test]
fn a_crash_is_reported_and_pending_work_gets_defaults() {
    let started = start(&["crash.sh"]);
    let pids = started.pids[&0].clone();
    started
        .host
        .run_tool(ExtensionId(0), "call-1", "crash_tool", &json!({}));
    let ExtensionEvent::Error(error) = started.next() else {
        panic!()
    };
    assert_eq!(error.event, "exit");
    assert!(
        error.error.contains("exited unexpectedly"),
        "{}",
        error.error
    );
    assert!(error.error.contains('3'), "{}", error.error);
    let ExtensionEvent::ToolFinished {
        call_id, output, ..
    } = started.next()
    else {
        panic!()
    };
    assert_eq!(call_id, "call-1");
    assert!(output.is_error);
    assert!(matches!(started.next(), ExtensionEvent::Exited { .. }));
    assert_gone(&pids);
    // Nobody handles tool_call any more; a tool of the dead extension fails at once.
    assert!(!started.host.handles_hook(HookKind::ToolCall));
    assert!(started.host.tools().is_empty());
    started
        .host
        .run_tool(ExtensionId(0), "call-2", "crash_tool", &json!({}));
    let ExtensionEvent::ToolFinished { output, .. } = started.next() else {
        panic!()
    };
    assert!(output.is_error);
    started.host.shutdown(Duration::ZERO);
}

#[test]
fn a_crash_during_a_hook_blocks_the_tool_call() {
    let started = start(&["crash.sh"]);
    let id = started
        .host
        .start_hook(
            HookKind::ToolCall,
            json!({"toolName":"bash","input":{}}),
            WAIT,
        )
        .unwrap();
    let event = started.next_where(|e| matches!(e, ExtensionEvent::HookResult { .. }));
    let ExtensionEvent::HookResult { id: got, outcome } = event else {
        panic!()
    };
    assert_eq!(got, id);
    assert!(matches!(
        outcome,
        HookOutcome::ToolCall(ToolCallOutcome::Block { reason, .. }) if reason.starts_with("Extension failed, blocking execution: exited unexpectedly")
    ));
}

#[test]
fn junk_output_stops_the_extension() {
    let started = start(&["junk.sh"]);
    let pids = started.pids[&0].clone();
    assert!(started.host.handles_hook(HookKind::Input));
    started.host.notify_event(&json!({"type": "agent_start"}));
    let ExtensionEvent::Error(error) = started.next() else {
        panic!()
    };
    assert_eq!(error.event, "protocol");
    assert!(error.error.contains("malformed output"), "{}", error.error);
    assert!(error.error.contains("this is not json"), "{}", error.error);
    assert!(matches!(started.next(), ExtensionEvent::Exited { .. }));
    assert!(!started.host.handles_hook(HookKind::Input));
    assert!(
        started
            .host
            .start_hook(HookKind::Input, json!({"text": "x"}), WAIT)
            .is_none()
    );
    assert_gone(&pids);
}

#[test]
fn approval_dialogs_answer_or_deny_on_timeout() {
    let (tx, events) = crossbeam_channel::unbounded();
    let (host, errors) = ExtensionHost::start(Vec::new(), &handshake(), None, tx, false);
    assert!(errors.is_empty());
    let (ui_id, ui) = host.ask_approval("Allow bash?", "rm x", Duration::from_millis(100));
    let record = ui.to_extension_value().unwrap();
    assert_eq!(record["id"], ui_id.as_str());
    assert_eq!(record["timeout"], 100);
    assert_eq!(
        events.recv_timeout(WAIT).unwrap(),
        ExtensionEvent::ApprovalAnswered {
            ui_id: ui_id.clone(),
            answer: ApprovalAnswer::Deny { timed_out: true }
        }
    );
    // A late answer is ignored.
    host.deliver_ui_response(&ui_id, UiResponse::default());
    let (ui_id, _) = host.ask_approval("Allow bash?", "make", WAIT);
    host.deliver_ui_response(
        &ui_id,
        UiResponse {
            value: Some(json!("Allow for this session")),
            ..UiResponse::default()
        },
    );
    assert_eq!(
        events.recv_timeout(WAIT).unwrap(),
        ExtensionEvent::ApprovalAnswered {
            ui_id,
            answer: ApprovalAnswer::AllowForSession
        }
    );
    assert!(events.try_recv().is_err());
    host.shutdown(Duration::ZERO);
}

#[test]
fn shutdown_leaves_no_process_behind() {
    let started = start(&["hello.sh", "full.py", "hang.sh"]);
    let pids: Vec<i32> = started.pids.values().flatten().copied().collect();
    assert_eq!(pids.len(), 4);
    let begun = Instant::now();
    started.host.shutdown(Duration::from_millis(500));
    // hang.sh ignores its closed stdin: it is killed when the grace period ends.
    assert!(begun.elapsed() < Duration::from_secs(3));
    assert_gone(&pids);
}

#[test]
fn dropping_the_host_kills_everything() {
    let started = start(&["hang.sh"]);
    let pids = started.pids[&0].clone();
    drop(started.host);
    assert_gone(&pids);
}

/// crash.sh started as the TypeScript host (`/bin/sh` as its "Node"), deferred: it registers
/// through the router; its first exit restarts it (the tool run ends with an error, then
/// `Restarting` and a new `Registered`); its second exit is one `exit` error and `Exited`.
#[test]
fn a_deferred_host_registers_later_and_is_restarted_once() {
    restarted_once(fixture("crash.sh").path, "crash_tool");
}

/// The same when the host exits while a child of its own keeps its stdout open (found by the
/// child check, not by the end of stdout): what the old process's reader reports after the
/// restart does not touch the new one.
#[test]
fn a_host_that_exits_behind_a_child_holding_its_stdout_is_restarted_once() {
    let dir = crate::test_support::temp_dir("ts-host-leaves-a-child");
    let script = dir.join("leaves.sh");
    std::fs::write(
        &script,
        "printf '%s\\n' '{\"type\":\"register\",\"protocol\":1,\"tools\":[{\"name\":\"leave\",\
         \"description\":\"Exits, its child stays\",\"parameters\":{\"type\":\"object\"}}]}'\n\
         while IFS= read -r line; do\n\
           case \"$line\" in '{\"type\":\"run_tool\"'*) sleep 30 & exit 3 ;; esac\n\
         done\n",
    )
    .unwrap();
    restarted_once(script, "leave");
    let _ = std::fs::remove_dir_all(&dir);
}

fn restarted_once(script: PathBuf, tool: &str) {
    let spec = ExtensionSpec {
        path: script.clone(),
        origin: ExtensionOrigin::TsHost(Box::new(crate::extensions::ts_host::TsHostLaunch {
            node: PathBuf::from("/bin/sh"),
            script,
            config: "{}".into(),
            modules: Vec::new(),
        })),
    };
    let (tx, events) = crossbeam_channel::unbounded();
    let (mut host, errors) = ExtensionHost::start(vec![spec], &handshake(), None, tx, true);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(host.is_registering());
    assert!(host.tools().is_empty());
    let not_ui = |e: &ExtensionEvent| !matches!(e, ExtensionEvent::UiRequest { .. });
    let next = || loop {
        let event = events.recv_timeout(WAIT).expect("an extension event");
        if not_ui(&event) {
            return event;
        }
    };
    let register = |host: &mut ExtensionHost, event: ExtensionEvent| match event {
        ExtensionEvent::Registered {
            extension,
            registration,
        } => host.registered(extension, registration),
        other => panic!("expected Registered, got {other:?}"),
    };
    register(&mut host, next());
    assert!(!host.is_registering());
    assert_eq!(host.tools()[0].decl.name, tool);

    host.run_tool(ExtensionId(0), "call-1", tool, &json!({}));
    match next() {
        ExtensionEvent::ToolFinished {
            call_id, output, ..
        } => {
            assert_eq!(call_id, "call-1");
            assert!(output.is_error);
            assert!(
                format!("{output:?}").contains("restarting it"),
                "{output:?}"
            );
        }
        other => panic!("expected the tool's error, got {other:?}"),
    }
    match next() {
        ExtensionEvent::Restarting { extension } => host.restarting(extension),
        other => panic!("expected Restarting, got {other:?}"),
    }
    assert!(host.is_registering());
    register(&mut host, next());
    assert_eq!(host.tools()[0].decl.name, tool);

    host.run_tool(ExtensionId(0), "call-2", tool, &json!({}));
    match next() {
        ExtensionEvent::Error(error) => {
            assert_eq!(error.event, "exit");
            assert!(
                error.error.contains("exited again after its restart"),
                "{error:?}"
            );
        }
        other => panic!("expected the exit error, got {other:?}"),
    }
    assert!(matches!(next(), ExtensionEvent::ToolFinished { .. }));
    assert!(matches!(next(), ExtensionEvent::Exited { .. }));
    assert!(!host.is_alive(ExtensionId(0)));
}

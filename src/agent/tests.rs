//! The loop's reactions to its channels, on an agent built without a client: each channel's
//! disconnect has its own meaning (only stdin's closing ends the loop).

use super::*;
use crate::test_support::temp_dir;

struct Ends {
    stdin: Sender<Input>,
    signals: Sender<i32>,
    _writer_events: Sender<WriterEvent>,
    out: Receiver<Record>,
    _dir: RemovedOnDrop,
}

struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn agent() -> (Agent, Ends) {
    let dir = temp_dir("agent-loop");
    let (cwd, agent_dir) = (dir.join("project"), dir.join("agent"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&agent_dir).unwrap();
    let config = Config::load(agent_dir.clone(), cwd.clone(), Some(false));
    let (sandbox, _) = crate::sandbox::Sandbox::new(None, None, None, &cwd, &agent_dir);
    let setup = AgentSetup {
        session: SessionLog::in_memory(&cwd),
        config,
        model: Model::placeholder(),
        thinking: ThinkingLevel::Off,
        tool_names: Vec::new(),
        tool_filter: Default::default(),
        restore_tools_with: None,
        system_prompt: Default::default(),
        scoped_models: Vec::new(),
        messages: Vec::new(),
        resources: Default::default(),
        extensions: None,
        extension_events: never(),
        reload: Default::default(),
        approvals: Default::default(),
        sandbox,
        startup_events: Vec::new(),
        profile: Profile::Default,
        mcp: None,
        client: None,
    };
    let (stdin_tx, stdin) = crossbeam_channel::unbounded();
    let (signals_tx, signals) = crossbeam_channel::bounded(4);
    let (writer_tx, writer_events) = crossbeam_channel::bounded(1);
    let (out, out_rx) = crossbeam_channel::unbounded();
    let channels = Channels {
        stdin,
        writer_events,
        signals,
        out,
    };
    let ends = Ends {
        stdin: stdin_tx,
        signals: signals_tx,
        _writer_events: writer_tx,
        out: out_rx,
        _dir: RemovedOnDrop(dir),
    };
    (Agent::new(setup, channels), ends)
}

#[test]
fn a_signals_thread_that_never_started_leaves_the_loop_running() {
    let (mut agent, ends) = agent();
    drop(ends.signals);
    let incoming = agent.next_incoming();
    assert!(matches!(incoming, Incoming::SignalsGone));
    agent.handle(incoming);
    assert!(
        agent.io.stdin_open,
        "a closed signals channel is not stdin's EOF"
    );
    assert_eq!(agent.io.exit_signal, None);
    // The closed channel is no longer read: the next thing the loop sees is stdin's EOF.
    drop(ends.stdin);
    assert!(matches!(agent.next_incoming(), Incoming::StdinClosed));
}

#[test]
fn without_signals_the_loop_still_answers_requests() {
    let (agent, ends) = agent();
    drop(ends.signals);
    let stdin = ends.stdin;
    // The request arrives after the loop has seen the signals channel closed.
    let client = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let request = crate::rpc::protocol::parse_record(br#"{"id":"s","type":"get_state"}"#);
        stdin.send(Input::Request(request.unwrap())).unwrap();
    });
    assert_eq!(agent.run(), 0);
    client.join().unwrap();
    let answered = ends
        .out
        .try_iter()
        .filter_map(|r| r.to_value())
        .any(|record| {
            record["type"] == "response" && record["id"] == "s" && record["success"] == true
        });
    assert!(
        answered,
        "the request sent after the signals channel closed was answered"
    );
}

#[test]
fn a_closed_bash_channel_gets_a_fresh_one() {
    let (mut agent, _ends) = agent();
    let (sender, events) = crossbeam_channel::bounded(1);
    drop(sender);
    agent.bash.events = events;
    let incoming = agent.next_incoming();
    assert!(matches!(incoming, Incoming::BashGone));
    agent.handle(incoming);
    assert!(agent.io.stdin_open);
    agent
        .bash
        .sender
        .send(bash_command::BashEvent {
            job: 7,
            kind: bash_command::BashEventKind::Delta("x".into()),
        })
        .unwrap();
    assert!(matches!(agent.next_incoming(), Incoming::Bash(_)));
}

#[test]
fn a_signal_still_arrives_as_a_signal() {
    let (mut agent, ends) = agent();
    ends.signals.send(15).unwrap();
    let incoming = agent.next_incoming();
    assert!(matches!(incoming, Incoming::Signal(15)));
}

#[test]
fn an_agent_that_ends_leaves_the_shells_of_others_running() {
    // An ACP connection runs several agents in one process: one session's end must not kill
    // another's tool shell (the process-wide kill is for the process's exit only).
    let dir = temp_dir("agent-end-shell");
    let ctx = crate::tools::ToolContext::for_test(&dir);
    let shell = std::thread::spawn(move || {
        let command = "touch started; while [ ! -e gate ]; do sleep 0.02; done; echo survived";
        crate::tools::bash::execute(
            &serde_json::json!({"command": command}),
            &ctx,
            &crate::child::CancelFlag::default(),
            &mut |_| {},
        )
        .0
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !dir.join("started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the shell never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (agent, ends) = agent();
    drop(ends.stdin);
    assert_eq!(agent.run(), 0);
    std::fs::write(dir.join("gate"), "").unwrap();
    let output = shell.join().unwrap();
    assert!(!output.is_error, "{output:?}");
    assert_eq!(output.first_text(), "survived\n");
    let _ = std::fs::remove_dir_all(dir);
}

//! `/mcp login <server>` in a session (pi 1.6.0's command outside its TUI): the sign-in runs on
//! its own thread, so the agent keeps working while the user is in the browser. Its news comes
//! back on the host's event channel: the authorization URL (the host shows it and asks the
//! client for a pasted redirect URL, as pi's `ctx.ui.input`), then the outcome. The client's
//! answer to that dialog reaches the sign-in through `pasted`.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::connection::{McpEvent, McpEventKind};
use super::oauth::{self, Settings};

/// How long a sign-in waits for the browser or a pasted URL (as `pi mcp login`'s default).
pub const TIMEOUT: Duration = Duration::from_secs(300);

/// How long the browser launcher is waited for (reaped) before it is left alone.
const LAUNCHER_REAP: Duration = Duration::from_secs(60);

/// Opens the authorization URL in the user's browser where pi 1.6.0 does (`/mcp login` in a
/// session, `pi mcp login`): `xdg-open <url>` (`open` on macOS), without a shell, in a session
/// of its own, output discarded, from `/`, with the tools' environment (no credentials). A
/// missing launcher or no display is ignored: the URL is shown anyway. Only http(s) URLs are
/// opened (the URL comes from the authorization server). Never blocks: a thread reaps the
/// launcher, for at most `LAUNCHER_REAP`.
pub fn open_browser(url: &str) {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return;
    }
    let launcher = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let mut command = std::process::Command::new(launcher);
    command
        .arg(url)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    crate::tools::env::scrub(&mut command);
    crate::child::isolate(&mut command, crate::child::Origin::Agent);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return log::debug!("no browser opened ({launcher}): {e}"),
    };
    let reaper = std::thread::Builder::new()
        .name("browser".into())
        .spawn(move || {
            let until = std::time::Instant::now() + LAUNCHER_REAP;
            while std::time::Instant::now() < until {
                if !matches!(child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    if let Err(e) = reaper {
        log::debug!("browser launcher not reaped: {e}");
    }
}

/// What a sign-in thread reports.
#[derive(Clone, Debug, PartialEq)]
pub enum SignInNews {
    /// The authorization URL the user opens.
    Url(String),
    /// The sign-in ended: `Ok` when the stored tokens are good; the error text otherwise
    /// (`oauth::SIGN_IN_CANCELLED` when the user dismissed it).
    Done(Result<(), String>),
}

/// Starts the sign-in of server `index`; returns where a pasted redirect URL goes (an empty
/// string cancels).
pub fn spawn(
    index: usize,
    settings: Settings,
    events: Sender<McpEvent>,
) -> std::io::Result<Sender<String>> {
    let (pasted_tx, pasted) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("mcp-login".into())
        .spawn(move || {
            let result = run(index, &settings, &events, pasted);
            let _ = events.send(McpEvent {
                server: index,
                kind: McpEventKind::SignIn(SignInNews::Done(result)),
            });
        })?;
    Ok(pasted_tx)
}

fn run(
    index: usize,
    settings: &Settings,
    events: &Sender<McpEvent>,
    pasted: Receiver<String>,
) -> Result<(), String> {
    // A server that takes the stored (or refreshed) token needs no browser.
    let Some(challenge) = oauth::probe(settings)? else {
        return Ok(());
    };
    struct Client<'a>(usize, &'a Sender<McpEvent>);
    impl oauth::SignInUi for Client<'_> {
        fn show_url(&mut self, url: &str) {
            let _ = self.1.send(McpEvent {
                server: self.0,
                kind: McpEventKind::SignIn(SignInNews::Url(url.to_string())),
            });
        }
    }
    match oauth::sign_in(
        settings,
        &challenge,
        &mut Client(index, events),
        pasted,
        TIMEOUT,
    ) {
        Ok(_) => Ok(()),
        Err(e) if e == oauth::TIMED_OUT => Err(format!(
            "not completed within {} seconds",
            TIMEOUT.as_secs()
        )),
        Err(e) => Err(e),
    }
}

//! The session log: pi's session file format (version 3), an append-only JSONL tree of entries
//! with `id`/`parentId`, owned by the agent thread. With `--no-session` it lives in memory only.
//!
//! Input: entries to append, leaf moves, fork/clone requests. Output: the rebuilt context
//! (messages, thinking level, model), the entries/tree for clients, new logs for forks. Writing
//! is lazy like pi's: nothing reaches disk before the first assistant message; then the header
//! and everything buffered go out as one atomic file creation, and each later entry is one
//! `write` of one complete line. A write that fails leaves the entry in memory and the file as it
//! was; the next append or `sync` retries. Nothing here panics on file content. Known secrets
//! are cut out of every line as it is written (`crate::redact`).
//!
//! Submodules: `entry` (line types), `file` (disk I/O, repair, migration), `tree` (context and
//! tree views), `locate` (directories, names, `--session`/`--continue` lookup), `open` (the
//! session a run starts with), `ids`, `index` (id → position).

mod entry;
mod file;
mod ids;
mod index;
mod locate;
pub mod open;
mod tree;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ids::uuid_v7;
use crate::redact::{self, Redactions};
use crate::time::now_iso;
pub use entry::{EntryKind, MessageBody, SessionEntry, SessionHeader};
use index::IdIndex;
pub use locate::{
    SessionArg, default_session_dir, find_by_id, find_most_recent, is_valid_session_id,
    list_sessions, resolve_session_arg, session_file_name,
};
pub use tree::{ContextEdits, Label, context_message};

use crate::config::ThinkingLevel;
use crate::messages::{AgentMessage, UserContent};

/// A session operation that failed: an entry could not be persisted (disk full, read-only dir,
/// …; the entry stays in memory), a file could not be opened, or an id was unknown. `Display` is
/// the text clients see in a response's `error` (pi's wording where pi has one).
#[derive(Debug)]
pub enum SessionError {
    /// `Cannot {action} session file {path}: {source}` (action: "read", "write", "append to",
    /// "sync").
    File {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A new session must never clobber another file.
    AlreadyExists(PathBuf),
    /// The first line is not a session header.
    NotASession(PathBuf),
    /// A torn tail could be cut neither by a rewrite (`atomic`) nor in place (`source`).
    Repair {
        path: PathBuf,
        atomic: Box<SessionError>,
        source: std::io::Error,
    },
    /// A failed append whose partial line could not be cut back either.
    PartialLineLeft {
        error: Box<SessionError>,
        source: std::io::Error,
    },
    /// No entry with this id.
    EntryNotFound(String),
    /// `fork` of an entry that is not a user message.
    NotForkable,
    /// `clone` with no current entry.
    NoCurrentEntry,
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::File {
                action,
                path,
                source,
            } => write!(
                f,
                "Cannot {action} session file {}: {source}",
                path.display()
            ),
            SessionError::CreateDir { path, source } => write!(
                f,
                "Cannot create session directory {}: {source}",
                path.display()
            ),
            SessionError::AlreadyExists(path) => {
                write!(f, "Session file already exists: {}", path.display())
            }
            SessionError::NotASession(path) => write!(
                f,
                "Not a session file (first line is not a session header): {}",
                path.display()
            ),
            SessionError::Repair {
                path,
                atomic,
                source,
            } => write!(
                f,
                "Cannot repair session file {}: {atomic}; {source}",
                path.display()
            ),
            SessionError::PartialLineLeft { error, source } => {
                write!(f, "{error} (partial line left in place: {source})")
            }
            SessionError::EntryNotFound(id) => write!(f, "Entry {id} not found"),
            SessionError::NotForkable => f.write_str("Invalid entry ID for forking"),
            SessionError::NoCurrentEntry => {
                f.write_str("Cannot clone session: no current entry selected")
            }
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::File { source, .. }
            | SessionError::CreateDir { source, .. }
            | SessionError::Repair { source, .. }
            | SessionError::PartialLineLeft { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What the active branch says the conversation is.
#[derive(Clone, Debug, Default)]
pub struct SessionContext {
    pub messages: Vec<AgentMessage>,
    /// The last thinking_level_change on the path; None when the branch has none (pi: "off").
    pub thinking_level: Option<ThinkingLevel>,
    /// (provider, model id) of the last model_change or assistant message (a failed route's
    /// excepted).
    pub model: Option<(String, String)>,
    /// When `model` is a reply's: the model_change before it, which is the selection instead
    /// when it names a registered virtual model (see `resolve_virtual_selection`).
    pub selected_before_reply: Option<(String, String)>,
}

impl SessionContext {
    /// (v2) pi 1.6.0's `getBranchSelection`: replies name the physical model a virtual selection
    /// was routed to, so a model_change naming a virtual model that is still registered holds
    /// over later replies; one nobody registers falls back to the model that answered last.
    pub fn resolve_virtual_selection(&mut self, is_virtual: impl Fn(&str, &str) -> bool) {
        if let Some((provider, id)) = self.selected_before_reply.take()
            && is_virtual(&provider, &id)
        {
            self.model = Some((provider, id));
        }
    }
}

/// A user message that can be forked from (get_fork_messages).
#[derive(Clone, Debug, PartialEq)]
pub struct ForkMessage {
    pub entry_id: String,
    pub text: String,
}

/// A `compaction` entry to append (`SessionLog::append_compaction`), in pi 1.6.0's fields.
pub struct NewCompaction<'a> {
    pub summary: &'a str,
    pub first_kept_entry_id: &'a str,
    pub tokens_before: u64,
    pub details: Option<Value>,
    /// The summary requests' usage.
    pub usage: Option<Value>,
    pub from_hook: Option<bool>,
    /// The prompt state replayed at compaction time.
    pub system_message: Option<Value>,
}

pub struct SessionLog {
    header: SessionHeader,
    cwd: PathBuf,
    /// Where sibling sessions (new, fork, clone) are created; None in memory.
    session_dir: Option<PathBuf>,
    /// None for an in-memory session.
    file: Option<PathBuf>,
    /// File order, header excluded.
    entries: Vec<SessionEntry>,
    /// id → index of its last occurrence in `entries`.
    by_id: IdIndex,
    /// target id → label, with the order in which it was first set (pi's Map order).
    labels: HashMap<String, (Label, u64)>,
    label_sequence: u64,
    leaf: Option<usize>,
    has_assistant: bool,
    disk: DiskState,
    /// Replaces the process-wide redaction set for this log (unit tests); `None` in the binary,
    /// where every line written is redacted with the set as it is at that moment.
    redactions: Option<Redactions>,
}

/// A summary, not the entries (a log can hold 100k of them).
impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog")
            .field("id", &self.id())
            .field("file", &self.file)
            .field("entries", &self.entries.len())
            .field("leaf", &self.leaf_id())
            .finish_non_exhaustive()
    }
}

/// How much of the log is queued for, and confirmed on, the disk.
#[derive(Debug, Default)]
struct DiskState {
    /// What the disk-writer thread managed; `persist` re-queues from here after a failure.
    written: std::sync::Arc<std::sync::Mutex<Written>>,
    header_queued: bool,
    /// `entries[..entries_queued]` have been handed to the disk-writer thread.
    entries_queued: usize,
    /// `Written::failures` when last looked at.
    failures_seen: u64,
    /// The file exists but holds nothing worth keeping (empty, or our own torn first write).
    may_replace: bool,
}

/// The file as the disk-writer thread left it.
#[derive(Debug, Default)]
struct Written {
    header_written: bool,
    /// `entries[..entries_written]` are in the file.
    entries_written: usize,
    /// Bumped at every failed write (and when the file vanished): tells `persist` to re-queue.
    failures: u64,
    /// The last failure's text (already reported on stderr).
    last_error: Option<String>,
}

impl Written {
    fn failed(&mut self, error: String) {
        log::error!("{error}");
        self.failures += 1;
        self.last_error = Some(error);
    }
}

fn lock_written(written: &std::sync::Mutex<Written>) -> std::sync::MutexGuard<'_, Written> {
    written.lock().unwrap_or_else(|p| p.into_inner())
}

/// One job for the disk-writer thread.
enum DiskWrite {
    /// The header and the first `entries` entries as a new file (atomic creation).
    Create {
        content: String,
        entries: usize,
        replace: bool,
    },
    /// Lines for `entries[first..first + lines.len()]`, each appended with one write.
    Append { first: usize, lines: Vec<String> },
}

impl DiskWrite {
    /// Runs on the disk-writer thread. Reports failures on stderr and records them in `written`
    /// so the next `persist` queues the missing part again. An `Append` that does not continue
    /// the file exactly where it ends (a write before it failed) is skipped: the re-queued copy
    /// comes later.
    fn run(self, path: &Path, written: &std::sync::Mutex<Written>) {
        match self {
            DiskWrite::Create {
                content,
                entries,
                replace,
            } => match create_file(path, &content, replace) {
                Ok(()) => {
                    let mut written = lock_written(written);
                    written.header_written = true;
                    written.entries_written = entries;
                }
                Err(e) => lock_written(written).failed(e.to_string()),
            },
            DiskWrite::Append { first, lines } => {
                let mut state = lock_written(written);
                if !state.header_written || first > state.entries_written {
                    return;
                }
                let already = state.entries_written - first;
                for line in lines.iter().skip(already) {
                    match file::append_line(path, line) {
                        Ok(true) => state.entries_written += 1,
                        Ok(false) => {
                            log::warn!(
                                "Session file {} disappeared; writing it again from memory",
                                path.display()
                            );
                            state.header_written = false;
                            state.entries_written = 0;
                            state.failures += 1;
                            return;
                        }
                        Err(e) => return state.failed(e.to_string()),
                    }
                }
            }
        }
    }
}

/// `text` with the secrets cut out, without a copy when there are none.
fn owned_redacted(redactions: &Redactions, text: String) -> String {
    let redacted = match redactions.apply(&text) {
        std::borrow::Cow::Owned(redacted) => Some(redacted),
        std::borrow::Cow::Borrowed(_) => None,
    };
    redacted.unwrap_or(text)
}

/// A whole new session file (its directory created if missing).
fn create_file(path: &Path, content: &str, replace: bool) -> Result<(), SessionError> {
    if let Some(parent) = path.parent() {
        crate::disk::create_private_dir_all(parent).map_err(|e| SessionError::CreateDir {
            path: parent.to_path_buf(),
            source: e,
        })?;
    }
    file::write_atomically(path, content.as_bytes(), replace)
}

impl SessionLog {
    /// A session that never touches the disk (`--no-session`).
    pub fn in_memory(cwd: &Path) -> SessionLog {
        let header = SessionHeader::new(&uuid_v7(), &now_iso(), &cwd.to_string_lossy(), None);
        SessionLog::from_parts(header, cwd.to_path_buf(), None, None, Vec::new())
    }

    /// A new session in `dir` (created if missing), file named from its start time and id.
    /// Nothing is written until the first assistant message.
    pub fn create(dir: &Path, cwd: &Path) -> Result<SessionLog, SessionError> {
        SessionLog::create_with_parent(dir, cwd, None)
    }

    /// Like [`SessionLog::create`], with `parentSession` in the header (new_session, forks).
    pub fn create_with_parent(
        dir: &Path,
        cwd: &Path,
        parent_session: Option<&str>,
    ) -> Result<SessionLog, SessionError> {
        crate::disk::create_private_dir_all(dir).map_err(|e| SessionError::CreateDir {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let (id, timestamp) = (uuid_v7(), now_iso());
        let header = SessionHeader::new(&id, &timestamp, &cwd.to_string_lossy(), parent_session);
        let file = dir.join(session_file_name(&timestamp, &id));
        Ok(SessionLog::from_parts(
            header,
            cwd.to_path_buf(),
            Some(dir.to_path_buf()),
            Some(file),
            Vec::new(),
        ))
    }

    /// Opens `path` (`--session`, `--continue`, switch_session). A missing or empty file gives a
    /// new session bound to that path, with `default_cwd`; an existing one is repaired and
    /// migrated as needed, its cwd taken from the header. `session_dir` is where forks go
    /// (default: the file's directory). Returns the log and the problems found while reading.
    pub fn open(
        path: &Path,
        session_dir: Option<&Path>,
        default_cwd: &Path,
    ) -> Result<(SessionLog, Vec<String>), SessionError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = session_dir
            .map(Path::to_path_buf)
            .or_else(|| path.parent().map(Path::to_path_buf));
        let fresh = |may_replace: bool| -> Result<SessionLog, SessionError> {
            if let Some(parent) = path.parent() {
                crate::disk::create_private_dir_all(parent).map_err(|e| {
                    SessionError::CreateDir {
                        path: parent.to_path_buf(),
                        source: e,
                    }
                })?;
            }
            let header =
                SessionHeader::new(&uuid_v7(), &now_iso(), &default_cwd.to_string_lossy(), None);
            let mut log = SessionLog::from_parts(
                header,
                default_cwd.to_path_buf(),
                dir.clone(),
                Some(path.clone()),
                Vec::new(),
            );
            log.disk.may_replace = may_replace;
            Ok(log)
        };
        match file::load(&path)? {
            file::Loaded::Missing => Ok((fresh(false)?, Vec::new())),
            file::Loaded::Empty { warnings } => Ok((fresh(true)?, warnings)),
            file::Loaded::Session(loaded) => {
                let cwd = loaded
                    .header
                    .cwd()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| default_cwd.to_path_buf());
                let mut log =
                    SessionLog::from_parts(loaded.header, cwd, dir, Some(path), loaded.entries);
                log.disk.header_queued = true;
                log.disk.entries_queued = log.entries.len();
                *lock_written(&log.disk.written) = Written {
                    header_written: true,
                    entries_written: log.entries.len(),
                    ..Written::default()
                };
                Ok((log, loaded.warnings))
            }
        }
    }

    fn from_parts(
        header: SessionHeader,
        cwd: PathBuf,
        session_dir: Option<PathBuf>,
        file: Option<PathBuf>,
        entries: Vec<SessionEntry>,
    ) -> SessionLog {
        let mut log = SessionLog {
            header,
            cwd,
            session_dir,
            file,
            entries: Vec::new(),
            by_id: IdIndex::default(),
            labels: HashMap::new(),
            label_sequence: 0,
            leaf: None,
            has_assistant: false,
            disk: DiskState::default(),
            redactions: None,
        };
        // Taken over as it is (a copy would hold the list twice for a moment), with room for
        // this run's appends so the first one does not double a large list.
        log.entries = entries;
        log.entries.reserve_exact(log.entries.len() / 16 + 16);
        log.by_id.reserve(&log.entries, log.entries.len());
        for position in 0..log.entries.len() {
            log.index(position);
        }
        log
    }

    /// Adds an entry to memory and the indexes, and makes it the leaf (if it has an id).
    fn push(&mut self, entry: SessionEntry) {
        self.entries.push(entry);
        self.index(self.entries.len() - 1);
    }

    /// Indexes `entries[position]` (labels, ids, leaf, first assistant message).
    fn index(&mut self, position: usize) {
        let entry = &self.entries[position];
        if entry.is_assistant_message() {
            self.has_assistant = true;
        }
        if let EntryKind::Label { target_id, label } = &entry.kind {
            match label.as_deref().filter(|l| !l.is_empty()) {
                Some(text) => {
                    let label = Label {
                        text: text.to_string(),
                        timestamp: entry.timestamp.clone(),
                    };
                    let sequence = match self.labels.get(target_id) {
                        Some((_, sequence)) => *sequence,
                        None => {
                            self.label_sequence += 1;
                            self.label_sequence
                        }
                    };
                    self.labels.insert(target_id.clone(), (label, sequence));
                }
                None => {
                    self.labels.remove(target_id);
                }
            }
        }
        if !entry.id.is_empty() {
            self.by_id.insert(&self.entries, position);
            self.leaf = Some(position);
        }
    }

    /// Replaces the secrets cut out of what this log writes (forks inherit them). Logs use the
    /// process-wide set of [`register_secrets`], which is what the binary uses.
    #[cfg(test)]
    pub fn set_redactions(&mut self, secrets: Vec<String>) {
        self.redactions = Some(Redactions::new(secrets));
    }

    /// The secrets this log cuts out of its file now, for an export of it.
    pub fn redactions(&self) -> Redactions {
        self.redactions
            .clone()
            .unwrap_or_else(redact::default_redactions)
    }

    pub fn id(&self) -> &str {
        self.header.id()
    }

    /// The working directory the session belongs to (its header's `cwd`).
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// `--continue` keeps the directory pi-rs was started in, whatever the file's header says
    /// (pi continues the newest session of the current directory, in the current directory).
    pub fn set_cwd(&mut self, cwd: &Path) {
        self.cwd = cwd.to_path_buf();
    }

    /// pi's refusal of a stored session whose working directory is gone (`--session`,
    /// `--continue`, `switch_session`); `None` when it exists or the session has no file yet.
    /// `current` is the directory the agent is in now.
    pub fn missing_cwd_error(&self, current: &Path) -> Option<String> {
        let file = self.file.as_ref()?;
        if self.cwd.exists() {
            return None;
        }
        Some(format!(
            "Stored session working directory does not exist: {}\nSession file: {}\nCurrent working directory: {}",
            self.cwd.display(),
            file.display(),
            current.display()
        ))
    }

    pub fn file_path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    pub fn session_dir(&self) -> Option<&Path> {
        self.session_dir.as_deref()
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    #[cfg(test)]
    pub fn parent_session(&self) -> Option<&str> {
        self.header.parent_session()
    }

    /// Whether anything of this session is on disk yet (or queued to be written).
    pub fn is_on_disk(&self) -> bool {
        self.disk.header_queued
    }

    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf.map(|i| self.entries[i].id.as_str())
    }

    pub fn entry(&self, id: &str) -> Option<&SessionEntry> {
        self.by_id.get(&self.entries, id).map(|i| &self.entries[i])
    }

    /// All entries in file order (header excluded).
    pub fn entries(&self) -> &[SessionEntry] {
        &self.entries
    }

    /// The label currently set on an entry.
    #[cfg(test)]
    pub fn label(&self, id: &str) -> Option<&Label> {
        self.labels.get(id).map(|(label, _)| label)
    }

    // ---------------------------------------------------------------------------------------
    // Appending. Each returns the new entry's id. On `Err` the entry is nevertheless in the log
    // (it is the leaf) and will be written by the next successful append or sync.

    fn append(&mut self, kind: EntryKind) -> Result<String, SessionError> {
        let parent = self.leaf_id().map(str::to_string);
        self.append_with_parent(parent, kind)
    }

    fn append_with_parent(
        &mut self,
        parent_id: Option<String>,
        kind: EntryKind,
    ) -> Result<String, SessionError> {
        let id = ids::entry_id(&|candidate| self.by_id.contains(&self.entries, candidate));
        self.push(SessionEntry::new(id.clone(), parent_id, now_iso(), kind));
        self.persist()?;
        Ok(id)
    }

    /// A message the agent already serialized (for stdout): the session keeps that same text,
    /// shared, instead of a second copy of a possibly huge reply, and types it only when asked.
    pub fn append_message_json(
        &mut self,
        json: crate::rpc::SharedJson,
    ) -> Result<String, SessionError> {
        self.append(EntryKind::Message(MessageBody::shared(json)))
    }

    #[cfg(test)]
    pub fn append_message(&mut self, message: &AgentMessage) -> Result<String, SessionError> {
        self.append(EntryKind::Message(MessageBody::typed(Some(Box::new(
            message.clone(),
        )))))
    }

    pub fn append_model_change(
        &mut self,
        provider: &str,
        model_id: &str,
    ) -> Result<String, SessionError> {
        self.append(EntryKind::ModelChange {
            provider: provider.to_string(),
            model_id: model_id.to_string(),
        })
    }

    pub fn append_thinking_level_change(
        &mut self,
        level: ThinkingLevel,
    ) -> Result<String, SessionError> {
        self.append(EntryKind::ThinkingLevelChange {
            thinking_level: level.as_str().to_string(),
        })
    }

    /// Sets the session name (trimmed; empty clears it).
    pub fn append_session_info(&mut self, name: &str) -> Result<String, SessionError> {
        self.append(EntryKind::SessionInfo {
            name: Some(name.trim().to_string()),
        })
    }

    /// pi writes `fromHook: false` for its own compactions.
    pub fn append_compaction(&mut self, entry: NewCompaction) -> Result<String, SessionError> {
        self.append(EntryKind::Compaction {
            summary: entry.summary.to_string(),
            first_kept_entry_id: entry.first_kept_entry_id.to_string(),
            tokens_before: entry.tokens_before,
            details: entry.details,
            usage: entry.usage,
            from_hook: entry.from_hook,
            system_message: entry.system_message,
        })
    }

    /// pi 1.6.0's `context_edit`: from here on the model's context leaves out (`None`) or
    /// replaces the message of entry `target_id`; the entry itself stays in the file.
    pub fn append_context_edit(
        &mut self,
        target_id: &str,
        replacement: Option<Value>,
    ) -> Result<String, SessionError> {
        let parent = self.leaf_id().map(str::to_string);
        let id = ids::entry_id(&|candidate| self.by_id.contains(&self.entries, candidate));
        let timestamp = now_iso();
        let line = serde_json::json!({
            "type": "context_edit", "id": id, "parentId": parent, "timestamp": timestamp,
            "targetId": target_id, "replacement": replacement,
        });
        let entry = SessionEntry::new(id.clone(), parent, timestamp, EntryKind::Unknown(line));
        self.push(entry);
        self.persist()?;
        Ok(id)
    }

    pub fn append_custom(
        &mut self,
        custom_type: &str,
        data: Option<Value>,
    ) -> Result<String, SessionError> {
        self.append(EntryKind::Custom {
            custom_type: custom_type.to_string(),
            data,
        })
    }

    pub fn append_custom_message(
        &mut self,
        custom_type: &str,
        content: UserContent,
        display: bool,
        details: Option<Value>,
    ) -> Result<String, SessionError> {
        self.append(EntryKind::CustomMessage {
            custom_type: custom_type.to_string(),
            content,
            display,
            details,
        })
    }

    /// Sets (`Some`, non-empty) or clears a label on an entry. Unknown target → `Entry <id> not
    /// found`, nothing appended.
    pub fn append_label(
        &mut self,
        target_id: &str,
        label: Option<&str>,
    ) -> Result<String, SessionError> {
        if !self.by_id.contains(&self.entries, target_id) {
            return Err(SessionError::EntryNotFound(target_id.to_string()));
        }
        let label = label.filter(|l| !l.is_empty()).map(str::to_string);
        self.append(EntryKind::Label {
            target_id: target_id.to_string(),
            label,
        })
    }

    /// Moves the leaf to `from_id` (None = before the first entry) and appends a branch_summary
    /// there (its `fromId` is the leaf left, or "root").
    pub fn branch_with_summary(
        &mut self,
        from_id: Option<&str>,
        summary: &str,
        details: Option<Value>,
        usage: Option<Value>,
        from_hook: Option<bool>,
    ) -> Result<String, SessionError> {
        // pi's `fromId`: the leaf whose abandoned path is summarized.
        let left = self.leaf_id().unwrap_or("root").to_string();
        match from_id {
            Some(id) => self.set_leaf(id)?,
            None => self.reset_leaf(),
        }
        let kind = EntryKind::BranchSummary {
            from_id: left,
            summary: summary.to_string(),
            details,
            usage,
            from_hook,
        };
        self.append_with_parent(from_id.map(str::to_string), kind)
    }

    // ---------------------------------------------------------------------------------------
    // Leaf and views

    /// Moves the leaf to an existing entry; the next append starts a new branch there.
    pub fn set_leaf(&mut self, id: &str) -> Result<(), SessionError> {
        match self.by_id.get(&self.entries, id) {
            Some(index) => {
                self.leaf = Some(index);
                Ok(())
            }
            None => Err(SessionError::EntryNotFound(id.to_string())),
        }
    }

    /// Leaf before the first entry: the next append is a new root.
    pub fn reset_leaf(&mut self) {
        self.leaf = None;
    }

    /// The entries from the root to the leaf.
    pub fn branch(&self) -> Vec<&SessionEntry> {
        match self.leaf {
            Some(leaf) => tree::path_to(&self.entries, &self.by_id, leaf)
                .into_iter()
                .map(|i| &self.entries[i])
                .collect(),
            None => Vec::new(),
        }
    }

    /// The current session name (latest session_info in file order, trimmed), if any.
    pub fn name(&self) -> Option<String> {
        self.entries
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                EntryKind::SessionInfo { name } => {
                    Some(name.as_deref().unwrap_or("").trim().to_string())
                }
                _ => None,
            })
            .filter(|name| !name.is_empty())
    }

    pub fn context(&self) -> SessionContext {
        tree::context(&self.entries, &self.by_id, self.leaf)
    }

    /// Where the entries after `since` start (0 for None).
    fn position_after(&self, since: Option<&str>) -> Result<usize, SessionError> {
        match since {
            None => Ok(0),
            Some(id) => self
                .by_id
                .get(&self.entries, id)
                .map(|i| i + 1)
                .ok_or_else(|| SessionError::EntryNotFound(id.to_string())),
        }
    }

    /// Entries strictly after `since` in append order (all entries for None), as JSON.
    pub fn entries_since(&self, since: Option<&str>) -> Result<Vec<Value>, SessionError> {
        let start = self.position_after(since)?;
        Ok(self.entries[start..]
            .iter()
            .map(SessionEntry::to_value)
            .collect())
    }

    /// [`SessionLog::entries_since`] serialized (a JSON array), written straight from the
    /// entries: a `Value` per entry costs about ten times the line's size.
    pub fn entries_since_json(&self, since: Option<&str>) -> Result<String, SessionError> {
        let start = self.position_after(since)?;
        let mut out = Vec::with_capacity((self.entries.len() - start) * 256 + 2);
        out.push(b'[');
        for (n, entry) in self.entries[start..].iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            entry.write_json(&mut out);
        }
        out.push(b']');
        // Always UTF-8: lines read were checked, the rest is serde_json's output.
        Ok(String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// The tree as `{entry, children, label?, labelTimestamp?}` values; orphans are roots,
    /// children sorted by timestamp. Nesting is as deep as the longest branch: for the wire
    /// prefer [`SessionLog::tree_json`], which is safe at any depth.
    #[cfg(test)]
    pub fn tree(&self) -> Vec<Value> {
        tree::tree_values(&self.entries, &self.by_id, &self.plain_labels())
    }

    /// [`SessionLog::tree`] serialized (a JSON array), built without recursion.
    #[cfg(test)]
    pub fn tree_json(&self) -> String {
        self.tree_json_between("", "")
    }

    /// `before`, [`SessionLog::tree_json`], `after`, in one buffer: get_tree's whole response
    /// line without a second copy of a tree that can be tens of MB.
    pub fn tree_json_between(&self, before: &str, after: &str) -> String {
        tree::tree_json(
            &self.entries,
            &self.by_id,
            &self.plain_labels(),
            before,
            after,
        )
    }

    fn plain_labels(&self) -> HashMap<String, Label> {
        self.labels
            .iter()
            .map(|(id, (label, _))| (id.clone(), label.clone()))
            .collect()
    }

    /// User message entries with non-empty text, in file order (get_fork_messages).
    pub fn fork_messages(&self) -> Vec<ForkMessage> {
        self.entries
            .iter()
            .filter(|entry| matches!(&entry.kind, EntryKind::Message(m) if m.has_role("user")))
            .filter_map(|entry| match entry.message().as_deref() {
                Some(AgentMessage::User(user)) => {
                    let text = user.content.text();
                    (!text.is_empty()).then(|| ForkMessage {
                        entry_id: entry.id.clone(),
                        text,
                    })
                }
                _ => None,
            })
            .collect()
    }

    // ---------------------------------------------------------------------------------------
    // Forks. These build a new log; the caller swaps it in. The new file is written at once if
    // the copy holds an assistant message (else lazily); a write failure is logged and retried
    // by the new log's next append or sync.

    /// RPC `fork`: `entry_id` must be a user message; the new session holds the path up to its
    /// parent. Returns the new log and the message's text.
    pub fn fork(&self, entry_id: &str) -> Result<(SessionLog, String), SessionError> {
        let entry = self.entry(entry_id).ok_or(SessionError::NotForkable)?;
        let message = entry.message();
        let Some(AgentMessage::User(user)) = message.as_deref() else {
            return Err(SessionError::NotForkable);
        };
        let text = user.content.text();
        let log = match entry.parent_id.as_deref() {
            Some(parent) => self.fork_at(parent)?,
            None => self.empty_child()?,
        };
        Ok((log, text))
    }

    /// RPC `clone`: the current branch, leaf kept.
    pub fn clone_at_leaf(&self) -> Result<SessionLog, SessionError> {
        let leaf = self.leaf_id().ok_or(SessionError::NoCurrentEntry)?;
        self.fork_at(leaf)
    }

    /// A new session holding the entries from the root to `entry_id` (ids preserved, label
    /// entries dropped and the labels on kept entries re-created at the end), with
    /// `parentSession` = this file. Unknown id → `Entry <id> not found`.
    pub fn fork_at(&self, entry_id: &str) -> Result<SessionLog, SessionError> {
        self.fork_at_into(entry_id, &self.cwd, None)
    }

    /// `--fork` and `--session` of another project: the current branch copied into a new session
    /// of `cwd` (pi forks into the directory it was started in), with the id `id` when given
    /// (`--session-id`).
    pub fn clone_into(&self, cwd: &Path, id: Option<&str>) -> Result<SessionLog, SessionError> {
        let leaf = self.leaf_id().ok_or(SessionError::NoCurrentEntry)?;
        self.fork_at_into(leaf, cwd, id)
    }

    /// Gives a session that has nothing on disk yet (new, or in memory) the id `id`
    /// (`--session-id`); its file is named for it.
    pub fn take_id(&mut self, id: &str) {
        self.header.set_id(id);
        if let (Some(dir), Some(timestamp)) = (&self.session_dir, self.header.timestamp())
            && self.file.is_some()
        {
            self.file = Some(dir.join(session_file_name(timestamp, id)));
        }
    }

    fn fork_at_into(
        &self,
        entry_id: &str,
        cwd: &Path,
        new_id: Option<&str>,
    ) -> Result<SessionLog, SessionError> {
        let target = self
            .by_id
            .get(&self.entries, entry_id)
            .ok_or_else(|| SessionError::EntryNotFound(entry_id.to_string()))?;
        let kept: Vec<SessionEntry> = tree::path_to(&self.entries, &self.by_id, target)
            .into_iter()
            .map(|i| self.entries[i].clone())
            .filter(|e| !matches!(e.kind, EntryKind::Label { .. }))
            .collect();
        let mut taken: HashSet<String> = kept.iter().map(|e| e.id.clone()).collect();
        let mut labels: Vec<(&String, &(Label, u64))> = self
            .labels
            .iter()
            .filter(|(id, _)| taken.contains(*id))
            .collect();
        labels.sort_by_key(|(_, (_, sequence))| *sequence);
        let mut parent = kept.last().map(|e| e.id.clone());
        let mut copied = kept;
        for (target_id, (label, _)) in labels {
            let id = ids::entry_id_not_in(&taken);
            taken.insert(id.clone());
            let kind = EntryKind::Label {
                target_id: target_id.clone(),
                label: Some(label.text.clone()),
            };
            copied.push(SessionEntry::new(
                id.clone(),
                parent.replace(id),
                label.timestamp.clone(),
                kind,
            ));
        }
        let id = new_id.map_or_else(uuid_v7, str::to_string);
        let timestamp = now_iso();
        let parent_session = self.file.as_ref().map(|f| f.to_string_lossy().into_owned());
        let header = SessionHeader::new(
            &id,
            &timestamp,
            &cwd.to_string_lossy(),
            parent_session.as_deref(),
        );
        let file = match (&self.file, &self.session_dir) {
            (Some(_), Some(dir)) => Some(dir.join(session_file_name(&timestamp, &id))),
            _ => None,
        };
        let mut log = SessionLog::from_parts(
            header,
            cwd.to_path_buf(),
            self.session_dir.clone(),
            file,
            copied,
        );
        log.redactions = self.redactions.clone();
        if let Err(e) = log.persist() {
            log::error!("Forked session not written yet (will retry): {e}");
        }
        Ok(log)
    }

    /// An empty session whose header points at this one (fork of the first message).
    fn empty_child(&self) -> Result<SessionLog, SessionError> {
        let mut log = match (&self.file, &self.session_dir) {
            (Some(file), Some(dir)) => {
                SessionLog::create_with_parent(dir, &self.cwd, Some(&file.to_string_lossy()))?
            }
            _ => SessionLog::in_memory(&self.cwd),
        };
        log.redactions = self.redactions.clone();
        Ok(log)
    }

    // ---------------------------------------------------------------------------------------
    // Disk

    /// Queues what is not written yet, then an fsync of the file; called at agent_end, before
    /// the session is replaced, and at shutdown (where `crate::disk::flush` waits for both).
    pub fn sync(&mut self) -> Result<(), SessionError> {
        self.persist()?;
        if let (Some(path), true) = (self.file.clone(), self.disk.header_queued) {
            // Behind the writes queued so far: the fsync covers them.
            crate::disk::write(move || {
                crate::disk::sync(move || {
                    if let Err(e) = file::sync_file(&path) {
                        log::error!("{e}");
                    }
                })
            });
        }
        Ok(())
    }

    /// Hands everything not yet queued to the disk-writer thread: the whole file first (pi's
    /// lazy rule: not before the first assistant message), then one line per entry. After a
    /// failed write (reported by that thread) the missing part is queued again from where the
    /// file really ends, so the next append or sync retries it.
    fn persist(&mut self) -> Result<(), SessionError> {
        let Some(path) = self.file.clone() else {
            return Ok(());
        };
        let mut replace = self.disk.may_replace;
        {
            let written = lock_written(&self.disk.written);
            if written.failures != self.disk.failures_seen {
                self.disk.failures_seen = written.failures;
                self.disk.header_queued = written.header_written;
                self.disk.entries_queued = written.entries_written;
                // A file that vanished is created again, never over something new.
                replace &= !written.header_written && written.entries_written == 0;
            }
        }
        let written = std::sync::Arc::clone(&self.disk.written);
        if !self.disk.header_queued {
            if !self.has_assistant {
                return Ok(()); // pi's lazy rule: no file for sessions that never got an answer
            }
            let content = file::whole_file(&self.header, &self.entries);
            // JSONL: a secret never spans lines, so the whole content is redacted at once.
            let content = owned_redacted(&self.redactions(), content);
            let job = DiskWrite::Create {
                content,
                entries: self.entries.len(),
                replace,
            };
            self.disk.header_queued = true;
            self.disk.entries_queued = self.entries.len();
            crate::disk::write(move || job.run(&path, &written));
            return Ok(());
        }
        if self.disk.entries_queued < self.entries.len() {
            let first = self.disk.entries_queued;
            let redactions = self.redactions();
            let lines = self.entries[first..]
                .iter()
                .map(|entry| owned_redacted(&redactions, entry.to_line()))
                .collect();
            self.disk.entries_queued = self.entries.len();
            let job = DiskWrite::Append { first, lines };
            crate::disk::write(move || job.run(&path, &written));
        }
        Ok(())
    }

    /// Writes the whole log synchronously (tests that build a large file fast).
    #[cfg(test)]
    fn write_whole_file(&mut self, path: &Path, replace: bool) -> Result<(), SessionError> {
        let content = file::whole_file(&self.header, &self.entries);
        create_file(path, &self.redactions().apply(&content), replace)?;
        self.disk.header_queued = true;
        self.disk.entries_queued = self.entries.len();
        *lock_written(&self.disk.written) = Written {
            header_written: true,
            entries_written: self.entries.len(),
            ..Written::default()
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests;

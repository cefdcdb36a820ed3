//! pi's TypeScript extensions (README "Extensions", "TypeScript extensions"): every `.ts` / `.js`
//! / `.mjs` / `.cjs` extension of a run goes to ONE Node process, pi-rs's own host script
//! (`ts_host/host.mjs`, embedded here), which loads them with the pi package's loader and
//! extension runner and speaks protocol 2 for all of them. To the rest of pi-rs the host is one
//! executable extension (`ExtensionOrigin::TsHost`).
//!
//! This file finds Node (`PI_RS_NODE`, settings `typescriptExtensions.node`, `node` on PATH) and
//! the pi package (`PI_RS_PI_PACKAGE`, settings `typescriptExtensions.piPackage`, next to a `pi`
//! on PATH, the global npm root), writes the host script to a private cache file, and replaces the
//! script modules among a run's extension specs by the host's spec. Nothing here runs when no
//! script module is configured (no file written, no Node looked for). The Node version is checked
//! inside the host (`process.versions`), where it costs no extra process.

use std::path::{Path, PathBuf};

use super::host::ExtensionError;
use super::{ExtensionOrigin, ExtensionSpec, is_script_module};
use crate::config::Config;

/// The host script, shipped inside the binary.
const HOST_SCRIPT: &str = include_str!("ts_host/host.mjs");
/// Environment variable naming the Node executable.
pub const NODE_ENV: &str = "PI_RS_NODE";
/// Environment variable naming the pi package's folder.
pub const PACKAGE_ENV: &str = "PI_RS_PI_PACKAGE";
/// The environment variable that carries the host's configuration (JSON).
pub const CONFIG_ENV: &str = "PI_RS_TS_HOST";
/// The package names whose loader and runner the host can use, newest first.
const PACKAGE_NAMES: [&str; 2] = [
    "@earendil-works/pi-coding-agent",
    "@mariozechner/pi-coding-agent",
];

/// How to start the host: `node <script>` with `CONFIG_ENV` = `config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsHostLaunch {
    pub node: PathBuf,
    pub script: PathBuf,
    pub config: String,
    /// The TypeScript extensions the host loads, in load order.
    pub modules: Vec<PathBuf>,
}

/// Replaces the script modules among `specs` by one host spec, at the place of the first one.
/// When the host cannot be prepared (no Node, no pi package, the script cannot be written), the
/// modules are left out and each gets one `load` error naming what to install or set.
pub fn gather(
    specs: Vec<ExtensionSpec>,
    config: &Config,
) -> (Vec<ExtensionSpec>, Vec<ExtensionError>) {
    let Some(first) = specs.iter().position(|s| is_script_module(&s.path)) else {
        return (specs, Vec::new());
    };
    let (modules, mut others): (Vec<ExtensionSpec>, Vec<ExtensionSpec>) =
        specs.into_iter().partition(|s| is_script_module(&s.path));
    let modules: Vec<PathBuf> = modules.into_iter().map(|s| s.path).collect();
    match prepare(&modules, config) {
        Ok(launch) => {
            let spec = ExtensionSpec {
                path: launch.script.clone(),
                origin: ExtensionOrigin::TsHost(Box::new(launch)),
            };
            others.insert(first.min(others.len()), spec);
            (others, Vec::new())
        }
        Err(error) => {
            let errors = modules
                .iter()
                .map(|path| ExtensionError {
                    extension_path: path.to_string_lossy().into_owned(),
                    event: "load".into(),
                    error: error.clone(),
                })
                .collect();
            (others, errors)
        }
    }
}

fn prepare(modules: &[PathBuf], config: &Config) -> Result<TsHostLaunch, String> {
    let setting = |key: &str| {
        config
            .setting(&format!("typescriptExtensions.{key}"))
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| crate::paths::expand_tilde(s, &crate::paths::home_dir()))
    };
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let node = env(NODE_ENV)
        .or_else(|| setting("node"))
        .or_else(|| crate::child::find_on_path("node"))
        .ok_or_else(|| {
            format!(
                "TypeScript extensions need Node.js 22.19 or newer: install it, or name it with \
                 {NODE_ENV} or settings typescriptExtensions.node"
            )
        })?;
    if !crate::child::is_executable(&node) {
        return Err(format!(
            "Node.js {} is not an executable file (TypeScript extensions need Node.js 22.19 or \
             newer; name it with {NODE_ENV} or settings typescriptExtensions.node)",
            node.display()
        ));
    }
    let package = match env(PACKAGE_ENV).or_else(|| setting("piPackage")) {
        Some(named) if is_pi_package(&named) => named,
        Some(named) => {
            return Err(format!(
                "{} is not the pi package (no dist/index.js): name the folder of \
                 @earendil-works/pi-coding-agent with {PACKAGE_ENV} or settings \
                 typescriptExtensions.piPackage",
                named.display()
            ));
        }
        None => find_package(&node).ok_or_else(|| {
            format!(
                "TypeScript extensions need the pi package: install it (npm install -g \
                 {}), or name its folder with {PACKAGE_ENV} or settings \
                 typescriptExtensions.piPackage",
                PACKAGE_NAMES[0]
            )
        })?,
    };
    let script = write_script(&config.agent_dir)
        .map_err(|e| format!("cannot write the TypeScript extension host: {e}"))?;
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let config = serde_json::json!({
        "extensions": modules.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>(),
        "package": package.to_string_lossy(),
        "exe": exe,
    })
    .to_string();
    Ok(TsHostLaunch {
        node,
        script,
        config,
        modules: modules.to_vec(),
    })
}

fn is_pi_package(dir: &Path) -> bool {
    dir.join("dist/index.js").is_file()
}

/// The pi package next to a `pi` on PATH (its real path's folders and their `node_modules`),
/// else in the global npm root (`$NPM_CONFIG_PREFIX`, else the prefix Node was installed in).
fn find_package(node: &Path) -> Option<PathBuf> {
    let in_modules = |dir: &Path| {
        PACKAGE_NAMES
            .iter()
            .map(|name| dir.join(name))
            .find(|p| is_pi_package(p))
    };
    if let Some(pi) = crate::child::find_on_path("pi") {
        let real = std::fs::canonicalize(&pi).unwrap_or(pi);
        for dir in real.ancestors().skip(1) {
            if PACKAGE_NAMES.iter().any(|n| dir.ends_with(n)) && is_pi_package(dir) {
                return Some(dir.to_path_buf());
            }
            if let Some(found) = in_modules(&dir.join("node_modules")) {
                return Some(found);
            }
        }
    }
    let mut prefixes: Vec<PathBuf> = std::env::var_os("NPM_CONFIG_PREFIX")
        .or_else(|| std::env::var_os("npm_config_prefix"))
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let real_node = std::fs::canonicalize(node).unwrap_or_else(|_| node.to_path_buf());
    if let Some(prefix) = real_node.parent().and_then(Path::parent) {
        prefixes.push(prefix.to_path_buf());
    }
    prefixes
        .iter()
        .find_map(|prefix| in_modules(&prefix.join("lib/node_modules")))
}

/// Writes the host script to `<agentDir>/cache/ts-host/host-<hash>.mjs` (folder 0700, the
/// content's hash in the name, written through a temporary file and a rename), once per version.
fn write_script(agent_dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = agent_dir.join("cache").join("ts-host");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, HOST_SCRIPT.as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(format!("host-{hash}.mjs"));
    if std::fs::read(&path).is_ok_and(|content| content == HOST_SCRIPT.as_bytes()) {
        return Ok(path);
    }
    let temporary = dir.join(format!(".host-{hash}.{}.tmp", std::process::id()));
    std::fs::write(&temporary, HOST_SCRIPT)?;
    std::fs::rename(&temporary, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;

    #[test]
    fn the_script_is_written_once_under_a_private_folder() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp_dir("ts-host-script");
        let first = write_script(&root).unwrap();
        let second = write_script(&root).unwrap();
        assert_eq!(first, second);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), HOST_SCRIPT);
        let mode = std::fs::metadata(first.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(&root);
    }
}

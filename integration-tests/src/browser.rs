//! The console's browser tests' tools: Node.js with `playwright-core` from npm (installed into
//! `integration-tests/browser/node_modules` with `npm ci` on first use, as `.ci/run` does up
//! front) and Debian's `chromium` (`apt-get install chromium`; never a browser download).
//! Anything missing fails the test with what to install: a browser test never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `integration-tests/browser/`: the scripts, `package.json` and `package-lock.json`.
pub fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// The chromium binary (`CHROMIUM`, default `/usr/bin/chromium`), checked to exist.
pub fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        path.exists(),
        "the console's browser tests need Debian's chromium at {} (apt-get install -y chromium; .ci/run installs it)",
        path.display()
    );
    path
}

/// Makes sure `node_modules` holds what `package-lock.json` pins (once per process).
pub fn node_modules() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = browser_dir();
        let lock = std::fs::read_to_string(dir.join("package-lock.json")).expect("browser/package-lock.json");
        let marker = dir.join("node_modules/.savepoint-lock");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(lock.as_str()) {
            eprintln!("browser tests: npm ci in {}", dir.display());
            let out = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("npm ci: cannot run npm (Node.js and npm are needed): {e}"));
            assert!(
                out.status.success(),
                "npm ci failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&marker, &lock).expect("write the node_modules marker");
        }
        dir.join("node_modules")
    })
}

/// Where a test run's screenshots go: `target/console-screenshots/<name>` (or
/// `SAVEPOINT_SCREENSHOTS/<name>`), emptied first.
pub fn screenshots(name: &str) -> PathBuf {
    let root = std::env::var("SAVEPOINT_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::var("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
                .join("console-screenshots")
        });
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

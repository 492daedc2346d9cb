//! The contract tests' Python tools (schemathesis, openapi-python-client, requests): a
//! virtualenv at `target/contract-venv` (or `SAVEPOINT_TEST_VENV`) with
//! `integration-tests/contract/requirements.txt` installed from PyPI. Made on first use and
//! again whenever the requirements change (the venv records the file it was made from), so
//! `cargo test --workspace` needs nothing set up by hand; `.ci/run` makes it up front.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `integration-tests/contract/`: the scripts, hooks and requirements.
pub fn contract_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contract")
}

fn venv_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SAVEPOINT_TEST_VENV") {
        return PathBuf::from(dir);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("contract-venv")
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The venv's `bin/` directory, made (once per process) if missing or stale.
pub fn venv_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let venv = venv_dir();
        let wanted = std::fs::read_to_string(contract_dir().join("requirements.txt")).expect("requirements.txt");
        let marker = venv.join("savepoint-requirements.txt");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
            eprintln!("contract tests: installing requirements.txt into {}", venv.display());
            run(
                Command::new("python3").arg("-m").arg("venv").arg("--clear").arg(&venv),
                "python3 -m venv (Python 3 with its venv module is needed for the contract tests)",
            );
            run(
                Command::new(venv.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
                    .arg(contract_dir().join("requirements.txt")),
                "pip install -r integration-tests/contract/requirements.txt",
            );
            std::fs::write(&marker, &wanted).expect("write the venv's requirements marker");
        }
        venv.join("bin")
    })
}

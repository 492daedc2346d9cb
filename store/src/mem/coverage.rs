//! Line coverage of the store's Lua scripts as the embedded engine runs them (`savepoint sim
//! --lua-coverage`): which lines of each script a simulation reached, out of the lines that
//! hold code. Off unless [`enable`] is called; then every Lua state the engine creates from
//! that moment on reports each line it starts to a process-wide table.
//!
//! The lines that hold code are read from the compiled chunk itself (Lua 5.1 bytecode, the
//! line of every instruction, nested functions included), so a line counts exactly when the
//! interpreter could report it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use mlua::{HookTriggers, Lua, VmState};

static ON: AtomicBool = AtomicBool::new(false);
static HITS: Mutex<BTreeMap<String, BTreeSet<u32>>> = Mutex::new(BTreeMap::new());

/// Starts recording (for Lua states created after this call).
pub fn enable() {
    ON.store(true, Ordering::SeqCst);
}

/// Installs the line hook on `lua` when recording is on.
pub(crate) fn hook(lua: &Lua) -> mlua::Result<()> {
    if !ON.load(Ordering::SeqCst) {
        return Ok(());
    }
    lua.set_hook(HookTriggers::EVERY_LINE, |_, d| {
        let source = d.source().source.map(|s| s.into_owned());
        if let (Some(src), Some(line)) = (source, d.current_line()) {
            let name = src.trim_start_matches('@').trim_end_matches(".lua").to_owned();
            if let Ok(mut hits) = HITS.lock() {
                hits.entry(name).or_default().insert(line as u32);
            }
        }
        Ok(VmState::Continue)
    })
}

/// One script's coverage (or the shared prelude's, under `_prelude`).
#[derive(Debug, Clone)]
pub struct ScriptCoverage {
    /// Script name (the file under `store/src/script/lua/`, without `.lua`).
    pub name: String,
    /// Lines (of the file) that hold code.
    pub lines: BTreeSet<u32>,
    /// Of those, the lines a run reached.
    pub hit: BTreeSet<u32>,
}

impl ScriptCoverage {
    /// Lines that hold code and were never reached.
    pub fn missed(&self) -> Vec<u32> {
        self.lines.difference(&self.hit).copied().collect()
    }
}

/// A script whose lines of code could not be read: it does not compile here, or its
/// bytecode is not what this reader expects.
#[derive(Debug, thiserror::Error)]
#[error("{script}: {reason}")]
pub struct CoverageError {
    /// The script.
    pub script: String,
    /// What failed.
    pub reason: String,
}

/// The coverage so far of every script of the store (the prelude, which every script
/// carries, counted once under `_prelude`).
pub fn report() -> Result<Vec<ScriptCoverage>, CoverageError> {
    let hits = HITS.lock().map(|h| h.clone()).unwrap_or_default();
    let scripts = crate::script_sources();
    let prelude_lines = crate::prelude_lines();
    let lua = Lua::new();
    let mut prelude = ScriptCoverage {
        name: "_prelude".into(),
        lines: BTreeSet::new(),
        hit: BTreeSet::new(),
    };
    let mut out = Vec::new();
    for (name, body) in scripts {
        let f = lua
            .load(body)
            .set_name(format!("@{name}.lua"))
            .into_function()
            .map_err(|e| CoverageError {
                script: name.to_string(),
                reason: e.to_string(),
            })?;
        let code = code_lines(&f.dump(false)).ok_or_else(|| CoverageError {
            script: name.to_string(),
            reason: "unreadable bytecode".into(),
        })?;
        let hit = hits.get(name).cloned().unwrap_or_default();
        let mut own = ScriptCoverage {
            name: name.to_owned(),
            lines: BTreeSet::new(),
            hit: BTreeSet::new(),
        };
        for l in code {
            let (cov, line) = if l <= prelude_lines {
                (&mut prelude, l)
            } else {
                // The body starts on the line after the prelude's and a separating newline.
                (&mut own, l - prelude_lines - 1)
            };
            cov.lines.insert(line);
            if hit.contains(&l) {
                cov.hit.insert(line);
            }
        }
        out.push(own);
    }
    out.insert(0, prelude);
    Ok(out)
}

/// The lines of every instruction of a Lua 5.1 chunk dump (made without stripping debug
/// information), nested functions included.
fn code_lines(dump: &[u8]) -> Option<BTreeSet<u32>> {
    // Header: ESC "Lua" 0x51, format, endianness, sizes of int, size_t, Instruction, number,
    // integral flag.
    if dump.len() < 12 || &dump[..5] != b"\x1bLua\x51" || dump[6] != 1 {
        return None;
    }
    let (int, size_t, num) = (dump[7] as usize, dump[8] as usize, dump[10] as usize);
    let mut r = Reader {
        b: dump,
        at: 12,
        int,
        size_t,
        num,
    };
    let mut lines = BTreeSet::new();
    r.function(&mut lines)?;
    Some(lines)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    int: usize,
    size_t: usize,
    num: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn uint(&mut self, width: usize) -> Option<u64> {
        let s = self.take(width)?;
        Some(s.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn int(&mut self) -> Option<usize> {
        self.uint(self.int).map(|v| v as usize)
    }

    fn string(&mut self) -> Option<()> {
        let n = self.uint(self.size_t)? as usize;
        self.take(n).map(|_| ())
    }

    fn function(&mut self, lines: &mut BTreeSet<u32>) -> Option<()> {
        self.string()?; // source
        self.int()?; // line defined
        self.int()?; // last line defined
        self.take(4)?; // upvalues, parameters, vararg flag, stack size
        let code = self.int()?;
        self.take(code.checked_mul(4)?)?;
        let constants = self.int()?;
        for _ in 0..constants {
            match self.take(1)?[0] {
                0 => {}
                1 => {
                    self.take(1)?;
                }
                3 => {
                    self.take(self.num)?;
                }
                4 => self.string()?,
                _ => return None,
            }
        }
        let protos = self.int()?;
        for _ in 0..protos {
            self.function(lines)?;
        }
        let line_info = self.int()?;
        for _ in 0..line_info {
            lines.insert(self.int()? as u32);
        }
        let locals = self.int()?;
        for _ in 0..locals {
            self.string()?;
            self.int()?;
            self.int()?;
        }
        let upvalues = self.int()?;
        for _ in 0..upvalues {
            self.string()?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_of_code_of_a_chunk_include_its_nested_functions_and_skip_comments() {
        let lua = Lua::new();
        let src = "-- a comment\nlocal function f(x)\n  return x + 1\nend\n\nlocal y = f(1)\nif y > 5 then\n  y = 0\nend\nreturn y\n";
        let f = lua.load(src).into_function().unwrap();
        let lines = code_lines(&f.dump(false)).unwrap();
        for l in [3, 6, 7, 8, 10] {
            assert!(lines.contains(&l), "line {l} holds code: {lines:?}");
        }
        assert!(!lines.contains(&1) && !lines.contains(&5), "{lines:?}");
    }

    #[test]
    fn every_script_of_the_store_has_readable_lines_of_code() {
        let report = report().unwrap();
        assert!(report.len() > 30, "{}", report.len());
        for s in &report {
            assert!(!s.lines.is_empty(), "{} has no lines of code", s.name);
        }
    }
}

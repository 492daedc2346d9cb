//! Versioned recorded values (ARCHITECTURE §4, "Values that outlive their code"): a type whose
//! shape changed declares its version and how to upgrade an older value, once, next to the
//! type; the workflow lists such types in [`Workflow::versions`](super::Workflow::versions).
//! Every value of a listed type is journaled with its version, and a replay upgrades a value
//! recorded by older code step by step before the code sees it. A value newer than the code
//! knows, or one with no way up, blocks the run with a reason naming the call and both
//! versions, never a silent default.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;

/// A recorded value's type with a version and the upgrades from its older shapes.
///
/// Adding a field with `#[serde(default)]` needs no version: old values decode as they are.
/// Renaming, retyping or removing a field does: raise `VERSION` and say, in
/// [`upgrade`](Self::upgrade), how a value of the version before becomes one of the next.
///
/// ```
/// use savepoint::workflow::{Migration, Versioned};
/// use serde::{Deserialize, Serialize};
/// use serde_json::{json, Value};
///
/// /// Version 1 had `amount` as a string of euros; version 2 has `cents`.
/// #[derive(Serialize, Deserialize)]
/// struct Invoice {
///     id: String,
///     cents: u64,
/// }
///
/// impl Versioned for Invoice {
///     const NAME: &'static str = "billing.Invoice";
///     const VERSION: u32 = 2;
///     fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
///         match from {
///             1 => {
///                 let euros: f64 = v["amount"].as_str().unwrap_or("0").parse().map_err(Migration::failed)?;
///                 v["cents"] = json!((euros * 100.0).round() as u64);
///                 v.as_object_mut().map(|o| o.remove("amount"));
///                 Ok(v)
///             }
///             _ => Err(Migration::Missing),
///         }
///     }
/// }
/// ```
pub trait Versioned: Serialize + DeserializeOwned + 'static {
    /// The type's name as runs record it (in their run features, `value:<NAME>@<version>`,
    /// and a child's output version, `<NAME>@<version>`): yours, stable across moves of the
    /// type to another module or crate and across compiler releases. Pick it once, like a
    /// table name: letters, digits and `._-:` (e.g. `"billing.Invoice"`), unique among the
    /// versioned types a worker registers (the registry refuses a clash at start-up).
    const NAME: &'static str;

    /// Names this type was recorded under before [`NAME`](Self::NAME): runs that recorded a
    /// value under one of them are still read by this type. Builds before `NAME` existed
    /// recorded `std::any::type_name` of the type (the path a waiting run's `waiting_for` shows,
    /// e.g. `"my_crate::billing::Invoice"`); that path of the type where it is now is always
    /// accepted, so list the old path here only after moving the type.
    const FORMERLY: &'static [&'static str] = &[];

    /// This shape's version: 1 for the type as first written; raise it with each change an
    /// older value does not decode into.
    const VERSION: u32;

    /// Turns a value recorded at version `from` into one of version `from + 1` (as JSON, the
    /// form it is journaled in). Called once per version between the recorded one and
    /// [`VERSION`](Self::VERSION), in order. [`Migration::Missing`] for a `from` with no way up.
    fn upgrade(from: u32, value: Value) -> Result<Value, Migration>;
}

/// Why a value could not be upgraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migration {
    /// No migration from this version (the run blocks until a build that has one).
    Missing,
    /// The value at this version could not be turned into the next (the run blocks with the
    /// message).
    Failed(String),
}

impl Migration {
    /// A failed migration with the error's message (`map_err(Migration::failed)`).
    pub fn failed(e: impl fmt::Display) -> Self {
        Migration::Failed(e.to_string())
    }
}

impl fmt::Display for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Migration::Missing => f.write_str("no migration declared"),
            Migration::Failed(m) => write!(f, "the migration failed: {m}"),
        }
    }
}

/// One declared type: its name, the names runs may have recorded it under before, its version
/// and upgrade function.
#[derive(Clone, Copy)]
struct Declaration {
    name: &'static str,
    formerly: &'static [&'static str],
    /// `std::any::type_name` of the type where it is now: what builds before
    /// [`Versioned::NAME`] recorded.
    path: &'static str,
    version: u32,
    upgrade: fn(u32, Value) -> Result<Value, Migration>,
}

impl Declaration {
    /// Every name a run may have recorded this type under, each once: its own first.
    fn names(&self) -> Vec<&'static str> {
        let mut names = vec![self.name];
        for n in self.formerly.iter().copied().chain([self.path]) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }
}

/// Why a versioned type's name cannot be used: empty, or with a character that the run
/// features' and output versions' encodings reserve (`@`, control characters, white space).
pub(crate) fn bad_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a versioned type's NAME is empty".into());
    }
    name.chars()
        .find(|c| *c == '@' || c.is_control() || c.is_whitespace())
        .map(|c| format!("the versioned type name {name:?} has {c:?}, which run features reserve"))
}

/// The versioned types a workflow records ([`Workflow::versions`](super::Workflow::versions)):
/// `Versions::new().of::<Invoice>().of::<Approval>()`.
#[derive(Clone, Default)]
pub struct Versions {
    by_type: HashMap<TypeId, Declaration>,
}

impl fmt::Debug for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_map();
        for d in self.by_type.values() {
            l.entry(&d.name, &d.version);
        }
        l.finish()
    }
}

/// How an upgrade of a recorded value went.
#[derive(Debug, Clone, PartialEq)]
pub enum Upgrade {
    /// The value as the code's version of its type has it, and how many migrations it went
    /// through (0: recorded at the code's version).
    Done(Value, u32),
    /// It cannot be read by this code: why, in a sentence naming the type and both versions.
    Refused(String),
}

impl Versions {
    /// No versioned types.
    pub fn new() -> Self {
        Self::default()
    }

    /// These versions with `T`'s declaration.
    pub fn of<T: Versioned>(mut self) -> Self {
        self.by_type.insert(
            TypeId::of::<T>(),
            Declaration {
                name: T::NAME,
                formerly: T::FORMERLY,
                path: std::any::type_name::<T>(),
                version: T::VERSION.max(1),
                upgrade: T::upgrade,
            },
        );
        self
    }

    /// These declarations and those of `W` ([`Workflow::versions`](super::Workflow::versions)),
    /// for a workflow that awaits runs of `W` as children (`ctx.child::<W>`): a worker serving
    /// it then names the run features of `W`'s output type, so a parent given back by an older
    /// build for a child's newer output finds it even where `W` is not registered.
    pub fn child<W: super::Workflow>(self) -> Self {
        self.and(&W::versions())
    }

    /// These declarations and `other`'s (a type both declare is the same type, declared once).
    pub(crate) fn and(mut self, other: &Versions) -> Self {
        for (t, d) in &other.by_type {
            self.by_type.entry(*t).or_insert(*d);
        }
        self
    }

    /// Whether no type is declared.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    /// The version `T` is recorded at by this code: `None` for version 1 (not written).
    pub fn version_of<T: 'static>(&self) -> Option<u32> {
        self.by_type
            .get(&TypeId::of::<T>())
            .map(|d| d.version)
            .filter(|v| *v > 1)
    }

    /// The name `T` is declared under, when this code records it above version 1 (the name
    /// its run feature carries: [`value_feature`](savepoint_core::model::value_feature)).
    pub fn name_of<T: 'static>(&self) -> Option<&'static str> {
        self.by_type
            .get(&TypeId::of::<T>())
            .filter(|d| d.version > 1)
            .map(|d| d.name)
    }

    /// The run features this code knows: every version above 1 of every declared type
    /// (`value:<type>@<v>`), up to its declared one, under each name the type may have been
    /// recorded under ([`Versioned::NAME`], [`Versioned::FORMERLY`], and its path, which
    /// builds before `NAME` recorded). A run that recorded a value of a version past them is
    /// given back by this worker's claim, untouched.
    pub fn features(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_type
            .values()
            .flat_map(|d| {
                d.names()
                    .into_iter()
                    .flat_map(move |n| (2..=d.version).map(move |v| savepoint_core::model::value_feature(n, v)))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Why these declarations cannot be registered, if they cannot: a name that is not
    /// usable ([`Versioned::NAME`]), or one name (own or former) declared by two types.
    pub(crate) fn problem(&self) -> Option<String> {
        let mut owner: HashMap<&str, &str> = HashMap::new();
        for d in self.by_type.values() {
            let own = std::iter::once(d.name).chain(d.formerly.iter().copied());
            if let Some(why) = own.filter_map(bad_name).next() {
                return Some(format!("{why} ({})", d.path));
            }
            for n in d.names().into_iter().filter(|n| *n != d.path) {
                if let Some(other) = owner.insert(n, d.path) {
                    if other != d.path {
                        return Some(format!(
                            "the versioned type name {n:?} is declared by both {other} and {}: give each \
                             its own NAME",
                            d.path
                        ));
                    }
                }
            }
        }
        None
    }

    /// Upgrades `value`, recorded at version `recorded` (`None`: 1) of `T`, to this code's
    /// version of `T`, one migration at a time.
    pub fn upgrade<T: 'static>(&self, recorded: Option<u32>, value: Value) -> Upgrade {
        let from = recorded.unwrap_or(1).max(1);
        let declared = self.by_type.get(&TypeId::of::<T>());
        let (name, to) = declared.map_or_else(
            || (std::any::type_name::<T>().to_owned(), 1),
            |d| (format!("{} ({})", d.name, d.path), d.version),
        );
        if from == to {
            return Upgrade::Done(value, 0);
        }
        let Some(d) = declared.filter(|_| from < to) else {
            return Upgrade::Refused(format!(
                "it was recorded at version {from} of {name} and this code knows version {to}: a newer build \
                 wrote it; run this workflow on a build that declares version {from} or later"
            ));
        };
        let mut v = value;
        for at in from..to {
            v = match (d.upgrade)(at, v) {
                Ok(next) => next,
                Err(why) => {
                    return Upgrade::Refused(format!(
                        "it was recorded at version {from} of {name} and this code reads version {to}: upgrading \
                         it from version {at} to {}: {why}",
                        at + 1
                    ))
                }
            };
        }
        Upgrade::Done(v, to - from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Totals {
        cents: u64,
    }

    impl Versioned for Totals {
        const NAME: &'static str = "test.Totals";
        const FORMERLY: &'static [&'static str] = &["old_crate::Totals"];
        const VERSION: u32 = 3;
        fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
            match from {
                // 1 → 2: `total` renamed `amount`.
                1 => {
                    let o = v.as_object_mut().ok_or_else(|| Migration::failed("not an object"))?;
                    let t = o.remove("total").ok_or_else(|| Migration::failed("no total"))?;
                    o.insert("amount".into(), t);
                    Ok(v)
                }
                // 2 → 3: euros (a float) became cents.
                2 => {
                    let euros = v["amount"]
                        .as_f64()
                        .ok_or_else(|| Migration::failed("amount is not a number"))?;
                    Ok(json!({ "cents": (euros * 100.0).round() as u64 }))
                }
                _ => Err(Migration::Missing),
            }
        }
    }

    #[test]
    fn upgrades_step_by_step_from_any_older_version() {
        let vs = Versions::new().of::<Totals>();
        assert_eq!(vs.version_of::<Totals>(), Some(3));
        assert_eq!(vs.version_of::<String>(), None);
        assert_eq!(
            vs.upgrade::<Totals>(None, json!({"total": 1.5})),
            Upgrade::Done(json!({"cents": 150}), 2)
        );
        assert_eq!(
            vs.upgrade::<Totals>(Some(2), json!({"amount": 2.0})),
            Upgrade::Done(json!({"cents": 200}), 1)
        );
        assert_eq!(
            vs.upgrade::<Totals>(Some(3), json!({"cents": 7})),
            Upgrade::Done(json!({"cents": 7}), 0)
        );
    }

    #[test]
    fn refuses_newer_values_and_failed_migrations_with_both_versions() {
        let vs = Versions::new().of::<Totals>();
        let Upgrade::Refused(why) = vs.upgrade::<Totals>(Some(4), json!({})) else {
            panic!()
        };
        assert!(
            why.contains("version 4") && why.contains("version 3") && why.contains("Totals"),
            "{why}"
        );
        let Upgrade::Refused(why) = vs.upgrade::<Totals>(None, json!({"amount": 1})) else {
            panic!()
        };
        assert!(
            why.contains("from version 1 to 2: the migration failed: no total"),
            "{why}"
        );
        // A type this code does not declare is at version 1: a versioned value of it is newer.
        let Upgrade::Refused(why) = Versions::new().upgrade::<Totals>(Some(2), json!({})) else {
            panic!()
        };
        assert!(why.contains("version 2") && why.contains("knows version 1"), "{why}");
    }

    #[test]
    fn knows_every_version_of_every_declared_type_above_one_under_each_of_its_names() {
        let vs = Versions::new().of::<Totals>();
        let path = std::any::type_name::<Totals>();
        assert_eq!(
            vs.name_of::<Totals>(),
            Some("test.Totals"),
            "its own name, not its path"
        );
        assert_eq!(vs.name_of::<String>(), None);
        let mut want: Vec<String> = ["test.Totals", "old_crate::Totals", path]
            .iter()
            .flat_map(|n| [format!("value:{n}@2"), format!("value:{n}@3")])
            .collect();
        want.sort();
        assert_eq!(vs.features(), want);
        assert!(Versions::new().features().is_empty());
        assert_eq!(vs.problem(), None);
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Clash;

    impl Versioned for Clash {
        const NAME: &'static str = "test.Totals";
        const VERSION: u32 = 2;
        fn upgrade(_: u32, v: Value) -> Result<Value, Migration> {
            Ok(v)
        }
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Unusable;

    impl Versioned for Unusable {
        const NAME: &'static str = "a@b";
        const VERSION: u32 = 2;
        fn upgrade(_: u32, v: Value) -> Result<Value, Migration> {
            Ok(v)
        }
    }

    #[test]
    fn a_name_two_types_declare_or_one_runs_cannot_record_is_refused() {
        let why = Versions::new().of::<Totals>().of::<Clash>().problem().unwrap();
        assert!(why.contains("\"test.Totals\" is declared by both"), "{why}");
        let why = Versions::new().of::<Unusable>().problem().unwrap();
        assert!(why.contains("reserve"), "{why}");
    }
}

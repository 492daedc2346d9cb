//! Typed handles: a value a workflow takes from outside, declared once as a constant with its
//! name and type, used at the call, and listed in [`Workflow::DECLARED`] so the worker
//! publishes its schema (the API then refuses a wrong-shaped answer with 422). The name
//! cannot drift between the declaration, the call and the schema, and the call's result type
//! is the handle's.
//!
//! ```ignore
//! const APPROVAL: Interrupt<ShippingApproval> = Interrupt::new("shipping_approval");
//! const PAUSE: Signal<bool> = Signal::new("pause");
//! const CHARGE: Effect<Charge> = Effect::new("card.charge");
//!
//! impl Workflow for Fulfil {
//!     const DECLARED: &'static [&'static dyn Declared] = &[&APPROVAL, &PAUSE, &CHARGE];
//!     // …
//!     async fn run(&self, ctx: &Ctx, order: Order) -> Result<Fulfilled, WorkflowError> {
//!         let approval = ctx.interrupt(APPROVAL, &question).await?; // a ShippingApproval
//!         let charge = ctx.effect(CHARGE, key, |fx| charge(fx)).await?; // a Charge
//!         // …
//!     }
//! }
//! ```
//!
//! A string still works where a handle does (`ctx.interrupt("gate", …)`, the answer's type
//! inferred), for code written before handles.
//!
//! [`Workflow::DECLARED`]: super::Workflow::DECLARED

use schemars::JsonSchema;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use super::Schemas;

/// An interrupt (a wait for a person's answer) whose answer is a `T`.
pub struct Interrupt<T> {
    name: Cow<'static, str>,
    ty: PhantomData<fn() -> T>,
}

/// A signal (a named value sent to a run) whose value is a `T`.
pub struct Signal<T> {
    name: Cow<'static, str>,
    ty: PhantomData<fn() -> T>,
}

/// An effect whose result is a `T`: `ctx.effect(CHARGE, key, f)` takes it where a name goes,
/// and `f` must return a `T`. Declared, its schema is the one an operator's resolve of the
/// effect in doubt is checked against.
pub struct Effect<T> {
    name: Cow<'static, str>,
    ty: PhantomData<fn() -> T>,
}

macro_rules! handle {
    ($handle:ident, $what:literal, $add:ident) => {
        impl<T> $handle<T> {
            #[doc = concat!("The ", $what, " named `name` (1-64 characters of `A-Z a-z 0-9 _ . -`).")]
            pub const fn new(name: &'static str) -> Self {
                Self {
                    name: Cow::Borrowed(name),
                    ty: PhantomData,
                }
            }

            /// Its name, as the API and the journal show it.
            pub fn name(&self) -> &str {
                &self.name
            }
        }

        impl<T> Clone for $handle<T> {
            fn clone(&self) -> Self {
                Self {
                    name: self.name.clone(),
                    ty: PhantomData,
                }
            }
        }

        impl<T> fmt::Debug for $handle<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($handle), self.name)
            }
        }

        /// A name written at the call (the value's type inferred from the code).
        impl<T> From<&str> for $handle<T> {
            fn from(name: &str) -> Self {
                Self::from(name.to_owned())
            }
        }

        /// A name made at run time (`format!("approval-{n}")`).
        impl<T> From<String> for $handle<T> {
            fn from(name: String) -> Self {
                Self {
                    name: Cow::Owned(name),
                    ty: PhantomData,
                }
            }
        }

        /// A name made at run time, borrowed (`&format!("approval-{n}")`).
        impl<T> From<&String> for $handle<T> {
            fn from(name: &String) -> Self {
                Self::from(name.clone())
            }
        }

        impl<T: JsonSchema> Declared for $handle<T> {
            fn declare(&self, schemas: Schemas) -> Schemas {
                schemas.$add::<T>(&self.name)
            }
        }
    };
}

handle!(Interrupt, "interrupt", interrupt);
handle!(Signal, "signal", signal);
handle!(Effect, "effect", effect);

/// A handle whose schema the worker publishes with the workflow's (see
/// [`Workflow::DECLARED`](super::Workflow::DECLARED)).
pub trait Declared: Sync {
    /// `schemas` with this handle's schema added.
    fn declare(&self, schemas: Schemas) -> Schemas;
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPROVAL: Interrupt<bool> = Interrupt::new("approval");
    const PAUSE: Signal<String> = Signal::new("pause");
    const CHARGE: Effect<u64> = Effect::new("charge");

    #[test]
    fn a_declared_handle_publishes_its_schema_under_its_name() {
        let declared: &[&dyn Declared] = &[&APPROVAL, &PAUSE, &CHARGE];
        let s = declared.iter().fold(Schemas::new(), |s, d| d.declare(s));
        assert_eq!(
            s,
            Schemas::new()
                .interrupt::<bool>("approval")
                .signal::<String>("pause")
                .effect::<u64>("charge")
        );
        assert_eq!(APPROVAL.name(), "approval");
        let from_str: Interrupt<u32> = "gate".into();
        assert_eq!(from_str.name(), "gate");
    }
}

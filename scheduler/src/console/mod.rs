//! The operator console at `/ui`: server-rendered pages (askama templates compiled into the
//! binary) over the same store reads as the API, and one small script (`assets/console.js`)
//! for live refresh and for actions. Every action is a call of the public `/v1` API made by
//! the browser, so the console can do nothing an API client cannot, and it never writes to
//! Redis itself.
//!
//! Pages: runs (`/ui`), a run (`/ui/runs/{thread_id}`), the approvals inbox (`/ui/inbox`),
//! needs attention (`/ui/attention`) and the fleet (`/ui/fleet`).

mod actions;
mod assets;
mod attention;
mod fleet;
mod format;
mod inbox;
mod lists;
mod page;
mod router;
mod run;
mod runs;
mod timeline;

pub(crate) use router::routes;

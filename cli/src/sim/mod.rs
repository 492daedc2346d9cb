//! Deterministic simulation (`savepoint sim`): the real API, due scanners and workers on the
//! embedded backend, under one seeded random source and simulated time, with faults injected
//! at every store and broker operation, then invariant checks.
//!
//! Each seed runs on its own current-thread tokio runtime with a paused clock: tasks are
//! polled in a fixed order, time only moves when every task waits, and every random draw of
//! the engine ([`savepoint_core::entropy`]) and of the simulator comes from the seed. So a seed
//! replays the same interleaving and the same trace every time, and a failing seed is a
//! reproducible bug report (`savepoint sim --seed S --verbose`).
//!
//! Faults (during the chaos phase): a store operation fails before it is applied, or is
//! applied and its reply lost, or stalls (up to several leases: a paused worker); a publish
//! fails, is duplicated or is delayed (reordered); the queue pushes a task to the consumer
//! after the one whose turn it is, or a sticky task on to the task queue (half the pushes: a
//! run's slices move between workers); a settlement fails; a worker is killed
//! (nothing settled or released) and restarted later; an effect's provider answers late.
//! Two scanner replicas race for every partition; on even seeds they split the partitions by
//! their live registrations instead, one crashes mid-chaos (its registration expires) and is
//! replaced, and one leaves at the heal and is replaced. Clients retry starts and repeat
//! resumes.
//!
//! The workload (`workload.rs`) uses every feature a seed can drive on one embedded instance:
//! effects under each in-doubt policy and interrupts (`order`, `approve`), flow control with
//! yields between steps (`metered`, slices of two steps), child workflows awaited and started
//! and forgotten, with parents cancelled mid-way (`parent`, `kid`), a parallel group of
//! effects and an effect whose attempts time out (`batch`), steps and short sleeps whose
//! bodies park between slices (`pace`), three schedules (`skip` and
//! `buffer_one` every second, `allow_all` every two) starting `tock` runs, all with sealed payloads and a
//! payload-key rotation mid-chaos (every worker restarted with the new sealing key and the
//! second build of the workload, whose `approve` changed the type of a recorded value).
//!
//! Invariants (checked after a heal phase in which faults stop and every worker is back):
//! 1. no effect key is applied twice at the provider (counted outside the engine; block and
//!    reconcile policies); the provider refuses tokens lower than one it has seen; the
//!    function of a `block` effect (a group's, or one whose attempt timed out, included) is
//!    never called twice;
//! 2. every run exists and ended completed, failed, cancelled or blocked with a reason;
//! 3. every journal only ever grew: an entry once read never changes, fences and versions
//!    never go back (no write of a fenced-out worker landed);
//! 4. every completed run replays against its journal to its recorded output;
//! 5. the store stays within its bounds (event cap, journal cap);
//! 6. flow control: at no instant were more runs of a key inside a step than its limit
//!    (witnessed by the provider), and at the end no slot is held and no live run waits in
//!    line;
//! 7. children: every child ended (or waits on a blocked child of its own, as a parent
//!    awaiting a blocked child does); every child of a cancelled parent ended cancelled, or
//!    had ended before the cancel, or finished the slice under way and started none after
//!    (its claim events); a parent holds a child's word only for a call not yet journaled,
//!    never more words than children, and an ended parent's signals expire with it;
//! 8. sealed payloads: after the rotation every run still opens (invariants 2 and 4 read
//!    them), and no value or key name in the namespace holds an input's plaintext marker;
//! 9. schedules (three, fired by two racing scheduler replicas, paused at the heal): every
//!    run a schedule started is one it counted and its last run is the latest, `skip` and
//!    `buffer_one` never had two runs open at once, `allow_all` missed no firing time,
//!    nothing is left pending or buffered; after these checks, `allow_all` resumed makes up
//!    no firing missed while paused, and deleted is gone;
//! 10. the operator (after the heal, as the runbook says): a run blocked on an effect in
//!     doubt, resolved with what the provider says ("not applied", or "applied" with its
//!     record), goes on and ends (invariant 1 sees the effect applied once, and its function
//!     called again only after a "not applied"); a completed order forked from its first
//!     effect, naming nothing to run again, completes, replays, and performs none of the
//!     effects applied when it was made; the first failed order (timed out, or refused as
//!     stale), restarted in place from its first effect (every other seed naming that effect
//!     in `rerun_effects`), ends, replays if it completed, and performs again exactly the
//!     effect named, once, and no other effect applied before; a run blocked because it
//!     kept crashing, retried, goes on and ends; an applied `charge` is first resolved
//!     with a receipt of the wrong shape, which the run takes back (it blocks on
//!     the key again, and the second, right answer settles it: never journaled);
//! 11. timeouts (a third of the runs other than parents have a deadline, 1–6 s, or 13–16 s
//!     for an order that sleeps past it): no function of a run is entered after its deadline
//!     (the provider notes when each run enters one), a run fails as timed out never before
//!     its deadline and only with one, and a deadline that passes once the fleet is quiet
//!     (8 s after the heal) ends its run within a second (a blocked run waits for its
//!     operator instead);
//! 12. split scanners (even seeds): every run ends though a replica crashed and another left
//!     (invariant 2), and the live registrations are exactly the running replicas;
//! 13. pipelined checkpoints (`witness.rs`, watched at every worker's store calls): no effect's
//!     begin record or intent, child link, suspension or end of a slice goes out while one of
//!     the slice's step commits is unanswered or after one failed, and a slice never has two
//!     commits in flight. (Faults at the store hit pipelined batches like any script: a batch
//!     refused, applied with its reply lost, or stalled past the lease.)
//! 14. pause (`pausing.rs`): the `order` workflow is paused through the API from 30 % to 60 %
//!     of the chaos (timers held on odd seeds, kept on even ones); no run of it is claimed
//!     (a `claimed` or `takeover` event, written by the claim itself with the store's time)
//!     between the pause's answer and the resume's request, and every run it stopped ends
//!     once resumed (invariants 1–2).
//! 15. waiting causes (`pausing.rs`): while that pause holds (from 35 %), for each status a
//!     held run can have, `GET /v1/runs?waiting_on=paused&status=S` lists every run of `order`
//!     that had that status before and after the listing, each saying it waits on the pause,
//!     and no run of another workflow.
//! 16. values that outlive their code (`checks.rs`): the key rotation is also a rolling
//!     deploy (one worker restarts on the second build, the others a quarter of the chaos later; the second
//!     build's `approve` records its `ask` step as a versioned value and upgrades the first
//!     build's, and a worker of the first build gives back a run holding such a value); no
//!     `approve` run blocks on a value,
//!     every `ask` entry is at version 1 or 2, a completed run asks the question its id asks,
//!     and invariant 4 replays every completed run on the second build, through the migration.
//!     The second build's `kid` returns a versioned `KidOut`: a `parent` reads its child's
//!     output from the version the child's build wrote it at (a first-build worker that meets
//!     a version-2 output gives the parent back), never blocks on it, and completes with the
//!     child's output in the first build's shape.
//! 17. parked bodies (`checks.rs`): every sleep and yield of a worker parks the run's body
//!     there, and its next slice on that worker goes on from it when the journal is what the
//!     body parked at (it replays otherwise: a slice on another worker wrote the run since,
//!     or the worker was killed); a completed `pace` run (steps folding their index into a
//!     value, each followed by a short sleep, on any of the three workers) returns what its
//!     input computes, and its journal holds its steps and sleeps in order, each once. The
//!     summary line counts the slices that began from a parked body, a held journal and a
//!     whole one.
//! 18. load on one worker (`busy.rs`): the embedded queue pushes tasks to consumers up to their
//!     prefetch and keeps each worker's sticky queue, as RabbitMQ does; whenever faults are
//!     off, no task waits more than 5 s beyond its allowance (a sticky queue's TTL) while a
//!     worker has a free slot and asks for one. A last phase loads one worker twice (runs
//!     that hold every slot for seconds and keep yielding to its sticky queue; then sixty
//!     runs of one 700 ms step, so a slot frees every 175 ms while the worker stays seconds
//!     behind), each time brings the others back idle and starts short runs: all of them end,
//!     none starved.
//! 19. stops longer than every TTL (`stop.rs`): a run paused after its worker died right
//!     after its first effect was marked done (before the journal entry), and a run waiting
//!     on a human, while the clock jumps 31 days (past the effect TTL: every lease,
//!     registration, timer and TTL due meanwhile fires at once); both complete once unpaused
//!     and answered, each effect called once at the provider.
//! 20. retention (`stop.rs`): after a jump past the retention and the effect TTL, no key of a
//!     run that ended is left (only the fleet's and those of runs still blocked), and no index
//!     lists a run that expired.
//! 21. a type moved between builds (`stop.rs`): the later half of the rolling deploy runs the
//!     second build with `Question` moved to another module; and a run that recorded it on the
//!     second build, waiting while every worker restarts on the moved one, completes and
//!     replays there (neither blocked nor waiting for a build).
//! 22. a crash loop (`busy.rs`): one worker dies 70 times in a row as it takes its first task,
//!     before the claim, each death returning that task and those pushed to it, counted, to
//!     the queue (delivery limit 20); then every run completes and no task was dead-lettered.

mod busy;
mod checks;
mod faults;
mod operate;
mod pausing;
mod runner;
mod schedules;
mod simulate;
mod stop;
mod witness;
mod workload;
mod world;

pub use runner::{run, run_seed, SeedReport, SimArgs};

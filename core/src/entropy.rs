//! The engine's randomness (retry jitter, ids, recorded `uuid()`/`random()`, failpoint
//! percentages), from one place so the simulator can make it deterministic.
//!
//! By default every draw comes from the operating system's generator (`rand`). A thread that
//! calls [`seed_thread`] draws from a seeded generator instead, until [`unseed_thread`]: the
//! simulator runs each seed on one current-thread runtime, so every task of that seed draws
//! from the same reproducible sequence.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes this thread's draws reproducible from `seed`.
pub fn seed_thread(seed: u64) {
    SEEDED.with(|s| *s.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Back to the operating system's generator on this thread.
pub fn unseed_thread() {
    SEEDED.with(|s| *s.borrow_mut() = None);
}

fn draw<T>(f: impl FnOnce(&mut dyn rand::RngCore) -> T) -> T {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(r) => f(r),
        None => f(&mut rand::rng()),
    })
}

/// A uniform number in [0, 1).
pub fn f64() -> f64 {
    draw(|r| r.random::<f64>())
}

/// A uniform 64-bit number.
pub fn u64() -> u64 {
    draw(|r| r.random::<u64>())
}

/// Key material and nonces: always the operating system's generator, never the simulator's
/// seeded one (a reproducible key or nonce would be a broken one; the bytes never reach a
/// decision the simulator replays).
pub fn secure_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    rand::rng().fill(&mut out[..]);
    out
}

/// A random (version 4) UUID.
pub fn uuid() -> uuid::Uuid {
    let bytes: [u8; 16] = draw(|r| r.random());
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_thread_repeats_its_sequence() {
        seed_thread(7);
        let a = (f64(), u64(), uuid());
        seed_thread(7);
        let b = (f64(), u64(), uuid());
        unseed_thread();
        assert_eq!(a, b);
        assert_eq!(a.2.get_version_num(), 4);
    }
}

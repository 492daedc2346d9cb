//! The step-task decoder (`savepoint_core::protocol::Task::decode`), fed arbitrary broker message
//! bodies: it must never panic, and a task it accepts must survive a round trip: encoding it
//! and decoding that gives the same task, and encoding is deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use savepoint_core::protocol::{Task, TASK_VERSION};

fuzz_target!(|data: &[u8]| {
    let Ok(task) = Task::decode(data) else { return };
    assert_eq!(task.v, TASK_VERSION, "decode accepted another version");
    let bytes = task.encode();
    let again = match Task::decode(&bytes) {
        Ok(t) => t,
        Err(e) => panic!("re-encoded task does not decode: {e}\n{task:?}\n{bytes:02x?}"),
    };
    assert_eq!(again, task, "round trip changed the task");
    assert_eq!(again.encode(), bytes, "encoding is not deterministic");
});

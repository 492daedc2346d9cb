//! The journal entry decoder (`savepoint_core::journal::Entry::decode`: version 4, 3 and 2
//! positional arrays and version 1 named maps), fed arbitrary bytes as a corrupted or hostile
//! run hash could hold: it must never panic, and an entry it accepts must survive a round trip
//! in the current format (`encode`: version 3, or 4 for a versioned value) and in the old one
//! (`encode_v1`, still read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use savepoint_core::journal::{Entry, ENTRY_VERSION};

fuzz_target!(|data: &[u8]| {
    let Ok(entry) = Entry::decode(data) else { return };
    assert_eq!(entry.v, ENTRY_VERSION, "decode returns entries at the current version");
    let v2 = entry.encode();
    match Entry::decode(&v2) {
        Ok(again) => assert_eq!(again, entry, "v3/v4 round trip changed the entry\n{v2:02x?}"),
        Err(e) => panic!("re-encoded entry does not decode: {e}\n{entry:?}\n{v2:02x?}"),
    }
    let v1 = entry.encode_v1();
    match Entry::decode(&v1) {
        Ok(again) => assert_eq!(again, entry, "v1 round trip changed the entry\n{v1:02x?}"),
        Err(e) => panic!("entry re-encoded as v1 does not decode: {e}\n{entry:?}\n{v1:02x?}"),
    }
});

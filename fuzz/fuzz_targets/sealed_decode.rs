//! The sealed-value decoder (`savepoint_store::codec`): bytes read back from Redis as a
//! sealed payload (`$sp1:<key id>:<base64url>`), fed arbitrary, must never panic; a value that
//! parses reports its key id and body as given; one that opens (only the seed corpus' values,
//! sealed with the fixed test key, can) opens to the same plaintext after a fresh seal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use savepoint_store::codec::{is_sealed, open_with, parse_sealed};
use savepoint_store::codec::{Binding, PayloadCodec};
use std::sync::OnceLock;

/// The key the seed corpus was sealed with (`fuzz/corpus/sealed_decode/`).
const KEY: &str = "fuzz:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn codec() -> &'static PayloadCodec {
    static C: OnceLock<PayloadCodec> = OnceLock::new();
    C.get_or_init(|| PayloadCodec::parse(KEY).expect("the fuzz key parses"))
}

fuzz_target!(|data: &[u8]| {
    let parsed = parse_sealed(data);
    assert_eq!(parsed.as_ref().map(Option::is_some).unwrap_or(true), is_sealed(data));
    if let Ok(Some(s)) = &parsed {
        assert!(!s.key_id.is_empty() && s.key_id.len() <= 32);
        assert!(data.windows(s.key_id.len()).any(|w| w == s.key_id.as_bytes()));
    }
    let binding = Binding::Run { thread: "fuzz-run", field: "j:0" };
    let _ = open_with(None, binding, data);
    if let Ok(plain) = codec().open(binding, data) {
        let plain = plain.into_owned();
        let again = codec().seal(binding, &plain);
        let back = codec().open(binding, again.as_bytes()).expect("a fresh seal opens");
        assert_eq!(&*back, &plain[..]);
        // Bound to its place: the same bytes never open for another field.
        if is_sealed(data) {
            assert!(codec().open(Binding::Run { thread: "fuzz-run", field: "j:1" }, data).is_err());
        }
    }
    let _ = codec().open(Binding::Effect { key: "fuzz-key" }, data);
});

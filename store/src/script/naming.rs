//! Names derived from user input are kept out of Redis key names (README "Security"): with
//! payload keys on, the Redis keys of a flow-control key (`{fc}:slots:<name>`, …) are named
//! by a keyed digest of it (HMAC-SHA256), not by the key, which may be a customer id taken
//! from an input. The digest's secret is 32 random bytes made once per namespace (the meta
//! hash's field `flow_naming`, written if absent), sealed like a payload: every process with
//! the payload keys derives the same names, and a key rotation does not change them (the
//! scheduler re-seals the secret with the schedules).

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use super::{Resealed, ScriptStore};
use crate::codec::{self, Binding};
use crate::StoreError;

/// The meta hash field holding the sealed naming secret.
const FIELD: &str = "flow_naming";
/// What the secret is sealed for (no run has this thread id: ids hold no spaces).
const BINDING: Binding<'static> = Binding::Run {
    thread: "namespace meta",
    field: FIELD,
};

/// HMAC-SHA256 (RFC 2104) for a 32-byte key, on `sha2`, which the store already uses: the
/// `hmac` crate's current release pairs with an older `sha2` than the workspace's.
fn hmac_sha256(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, b) in key.iter().enumerate() {
        ipad[i] ^= b;
        opad[i] ^= b;
    }
    let inner = Sha256::new().chain_update(ipad).chain_update(msg).finalize();
    Sha256::new().chain_update(opad).chain_update(inner).finalize().into()
}

impl ScriptStore {
    /// The name flow key `key` has in Redis key names: the key itself without payload keys;
    /// with them `h-` and the first 16 bytes of its keyed digest in hex.
    pub async fn flow_name<'a>(&self, key: &'a str) -> Result<Cow<'a, str>, StoreError> {
        if self.cfg.codec.is_none() {
            return Ok(Cow::Borrowed(key));
        }
        let secret = self.naming_secret().await?;
        Ok(Cow::Owned(format!(
            "h-{}",
            hex::encode(&hmac_sha256(&secret, key.as_bytes())[..16])
        )))
    }

    /// The namespace's naming secret: read (and opened) once per store, made if absent.
    async fn naming_secret(&self) -> Result<[u8; 32], StoreError> {
        self.naming
            .get_or_try_init(|| async {
                let meta = self.keys.meta();
                let get = redis::cmd("HGET").arg(&meta).arg(FIELD).clone();
                let stored = match self.query::<Option<Vec<u8>>>(&get).await? {
                    Some(v) => v,
                    None => {
                        let fresh: [u8; 32] = savepoint_core::entropy::secure_bytes();
                        let sealed = match &self.cfg.codec {
                            Some(c) => c.seal(BINDING, &fresh),
                            None => {
                                return Err(StoreError::Corrupt("no payload keys to seal the naming secret".into()))
                            }
                        };
                        // (Another process may have made it first: whichever was written is read.)
                        let _: i64 = self
                            .query(redis::cmd("HSETNX").arg(&meta).arg(FIELD).arg(sealed))
                            .await?;
                        self.query::<Option<Vec<u8>>>(&get)
                            .await?
                            .ok_or_else(|| StoreError::Corrupt("the naming secret vanished as it was written".into()))?
                    }
                };
                let plain = codec::open_with(self.cfg.codec.as_ref(), BINDING, &stored)
                    .map_err(|e| StoreError::Sealed(format!("the namespace's flow naming secret: {e}")))?;
                <[u8; 32]>::try_from(plain.as_ref())
                    .map_err(|_| StoreError::Corrupt("the naming secret is not 32 bytes".into()))
            })
            .await
            .copied()
    }

    /// Seals the naming secret anew with the sealing key if another key sealed it (a
    /// rotation), as schedules are.
    pub async fn naming_reseal(&self) -> Result<Resealed, StoreError> {
        let Some(c) = &self.cfg.codec else {
            return Ok(Resealed::Current);
        };
        let meta = self.keys.meta();
        let stored: Option<Vec<u8>> = self.query(redis::cmd("HGET").arg(&meta).arg(FIELD)).await?;
        let Some(stored) = stored else {
            return Ok(Resealed::Current);
        };
        if let Ok(Some(s)) = codec::parse_sealed(&stored) {
            if s.key_id == c.sealing_key_id() {
                return Ok(Resealed::Current);
            }
        }
        let plain = codec::open_with(Some(c), BINDING, &stored)
            .map_err(|e| StoreError::Sealed(format!("the namespace's flow naming secret: {e}")))?;
        let sealed = c.seal(BINDING, &plain);
        self.reseal_field(&meta, FIELD, &stored, sealed.as_bytes()).await
    }
}

#[cfg(test)]
mod tests {
    use super::hmac_sha256;

    /// RFC 4231 test case 2 has a 4-byte key; this is the same construction checked against
    /// a value computed with Python's `hmac` for a 32-byte key of 0x0b.
    #[test]
    fn hmac_matches_a_reference_value() {
        let mac = hmac_sha256(&[0x0b; 32], b"Hi There");
        assert_eq!(
            hex::encode(mac),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }
}

//! API tokens: who may call the scheduler's API and console, and with which role (README
//! "Security"). Only a token's SHA-256 digest is configured, so the config file, the Secret and
//! the process environment never hold a token that works; a presented token is hashed and
//! compared with every configured digest in constant time.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::SecurityError;

/// What a token may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Get, list, history, diagnosis, export, result, the console's pages.
    Read,
    /// Start, resume, signal, cancel, retry.
    Operate,
    /// Settle in-doubt effects (resolve): anything that can make an effect run again.
    Admin,
}

impl Role {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Operate => "operate",
            Role::Admin => "admin",
        }
    }

    /// Parses `read`, `operate` or `admin`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read" => Some(Role::Read),
            "operate" => Some(Role::Operate),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// One configured token: a name (recorded in the run's events for every action it takes), a
/// role, and the SHA-256 of the token in hex.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// Who holds it (`ci-bot`, `alice`): 1-64 characters of `A-Z a-z 0-9 _ - . @`.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// `sha256:<64 hex digits>` (or the bare hex digest) of the token.
    pub sha256: String,
}

impl TokenSpec {
    /// Parses `name:role:sha256hex` (the env and file form; `sha256:` may prefix the digest).
    pub fn parse_line(line: &str) -> Result<Self, SecurityError> {
        let mut parts = line.trim().splitn(3, ':');
        let (Some(name), Some(role), Some(digest)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SecurityError::TokenShape { line: line.to_owned() });
        };
        let role = Role::parse(role.trim()).ok_or_else(|| SecurityError::TokenRole { line: line.to_owned() })?;
        let spec = TokenSpec {
            name: name.trim().to_owned(),
            role,
            sha256: digest.trim().to_owned(),
        };
        spec.digest()?;
        Ok(spec)
    }

    /// Parses a list: entries separated by commas, semicolons or newlines; `#` starts a comment
    /// that runs to the end of its line.
    pub fn parse_list(text: &str) -> Result<Vec<Self>, SecurityError> {
        text.lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .flat_map(|line| line.split([',', ';']))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Self::parse_line)
            .collect()
    }

    fn digest(&self) -> Result<[u8; 32], SecurityError> {
        let ok_name = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b));
        if !ok_name {
            return Err(SecurityError::TokenName {
                name: self.name.clone(),
            });
        }
        let hex_digest = self.sha256.strip_prefix("sha256:").unwrap_or(&self.sha256);
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_digest, &mut out).map_err(|_| SecurityError::TokenDigest {
            name: self.name.clone(),
        })?;
        Ok(out)
    }
}

/// The SHA-256 of `token`, as configured: `sha256:<hex>`.
pub fn token_digest(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// A new random token (`spt_` and 43 characters of base64url: 256 bits).
pub fn new_token() -> String {
    use base64::Engine as _;
    let raw: [u8; 32] = savepoint_core::entropy::secure_bytes();
    format!("spt_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// Who a verified token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// The configured tokens, ready to verify presented ones.
#[derive(Debug, Clone, Default)]
pub struct TokenSet {
    entries: Vec<(Principal, [u8; 32])>,
}

impl TokenSet {
    /// Checks and collects `specs` (names must be unique).
    pub fn new(specs: &[TokenSpec]) -> Result<Self, SecurityError> {
        let mut entries: Vec<(Principal, [u8; 32])> = Vec::with_capacity(specs.len());
        for s in specs {
            let digest = s.digest()?;
            if entries.iter().any(|(p, _)| p.name == s.name) {
                return Err(SecurityError::TokenTwice { name: s.name.clone() });
            }
            entries.push((
                Principal {
                    name: s.name.clone(),
                    role: s.role,
                },
                digest,
            ));
        }
        Ok(Self { entries })
    }

    /// True when no token is configured (the API is open).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The holder of `presented`, if it is a configured token. Every digest is compared, in
    /// constant time, whether or not an earlier one matched.
    pub fn verify(&self, presented: &str) -> Option<&Principal> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (p, d) in &self.entries {
            if bool::from(d.ct_eq(&digest)) {
                found = Some(p);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_by_digest_with_their_role() {
        let ops = new_token();
        let admin = new_token();
        assert!(ops.starts_with("spt_") && ops.len() == 47, "{ops}");
        let specs = TokenSpec::parse_list(&format!(
            "# a comment, with commas; and semicolons\nci-bot:operate:{}  # CI\nalice@example:admin:{}",
            token_digest(&ops),
            token_digest(&admin).trim_start_matches("sha256:")
        ))
        .unwrap();
        let set = TokenSet::new(&specs).unwrap();
        assert_eq!(
            set.verify(&ops).map(|p| (p.name.as_str(), p.role)),
            Some(("ci-bot", Role::Operate))
        );
        assert_eq!(set.verify(&admin).map(|p| p.role), Some(Role::Admin));
        assert_eq!(set.verify("spt_nope"), None);
        assert_eq!(set.verify(""), None);
        assert!(Role::Admin > Role::Operate && Role::Operate > Role::Read);
    }

    #[test]
    fn bad_token_specs_are_refused() {
        for bad in ["x:read", "x:root:sha256:00", "x:read:zz", "bad name:read:sha256:00"] {
            assert!(TokenSpec::parse_line(bad).is_err(), "{bad}");
        }
        let d = token_digest("a");
        let twice = TokenSpec::parse_list(&format!("a:read:{d},a:admin:{d}")).unwrap();
        assert!(TokenSet::new(&twice).is_err());
    }
}

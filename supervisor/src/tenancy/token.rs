//! Tenant tokens: `svc_<id>_<secret>`, where the id is 8 public hex digits that name the token in listings and the
//! secret is 256 random bits as hex. The store keeps only the SHA-256 of the whole token.
//!
//! The id in the token lets a check find its one record without comparing against every stored hash; the secret's
//! digest is then compared in constant time, so the time a refusal takes says nothing about how close a guess was.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What every tenant token starts with, so that a leaked one is recognisable (and scanners can find it).
pub const PREFIX: &str = "svc_";
/// Hex digits of a token's public id.
const ID_LEN: usize = 8;
/// Hex digits of a token's secret (256 bits).
const SECRET_LEN: usize = 64;

/// A new token and its public id.
pub struct Minted {
    /// The short public id (`tokens list`, `tokens revoke`).
    pub id: String,
    /// The whole token, shown once.
    pub token: String,
    /// Its digest, which is all the store keeps.
    pub sha256: String,
}

/// Random bytes from the operating system.
fn random<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    Ok(bytes)
}

/// Mints a token: a fresh id and 256 bits of secret.
pub fn mint() -> Result<Minted, getrandom::Error> {
    let id = hex::encode(random::<{ ID_LEN / 2 }>()?);
    let secret = hex::encode(random::<{ SECRET_LEN / 2 }>()?);
    let token = format!("{PREFIX}{id}_{secret}");
    let sha256 = digest(&token);
    Ok(Minted { id, token, sha256 })
}

/// The SHA-256 of `token`, as lower-case hex.
pub fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The public id of a token that has the tenant token's shape; None for any other string.
pub fn id_of(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, ID_LEN) && hex(secret, SECRET_LEN)).then_some(id)
}

/// Whether `token` hashes to `sha256` (hex), compared in constant time.
pub fn matches(token: &str, sha256: &str) -> bool {
    let Ok(stored) = hex::decode(sha256) else {
        return false;
    };
    let given = Sha256::digest(token.as_bytes());
    given.as_slice().ct_eq(&stored).into()
}

/// Whether two secrets are equal, in time that depends only on their lengths.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_names_its_id_and_matches_only_its_own_digest() {
        let a = mint().unwrap();
        let b = mint().unwrap();
        assert_eq!(id_of(&a.token), Some(a.id.as_str()));
        assert_eq!(a.token.len(), PREFIX.len() + ID_LEN + 1 + SECRET_LEN);
        assert!(matches(&a.token, &a.sha256));
        assert!(!matches(&b.token, &a.sha256));
        assert!(!matches(&a.token, "not hex"));
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn strings_of_another_shape_have_no_id() {
        for bad in [
            "",
            "svc_",
            "svc_1234567_",
            "svc_12345678_abc",
            "svc_1234567g_0000000000000000000000000000000000000000000000000000000000000000",
            "tok_12345678_0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(id_of(bad), None, "{bad}");
        }
    }
}

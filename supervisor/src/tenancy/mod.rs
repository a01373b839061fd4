//! Tenants: who a request speaks for, what it may see, and how much it may spend.
//!
//! - [`token`]: the shape of a tenant token, its digest and its constant-time check.
//! - [`cache`]: [`Tenancy`], the directory with caches in front, and this process's side of the usage ledger.
//! - [`files`]: the [`Directory`] of a files store (`$SERVICE_HOME/tenants.json`); the PostgreSQL store has its own
//!   tables (`runtime::store::postgres::tenants`), so that every node of a cluster knows a token, a revocation, a
//!   quota and the day's spending at once.
//!
//! A session belongs to the tenant whose token created it ([`crate::runtime::SessionRecord::tenant`]). The server's
//! own token (`--token`, `SERVICE_TOKEN`, `serve.token`) is the admin token of the tenant `default`, so a set-up with
//! one token works as it did. [`Tenancy`] sits in front of the directory: it caches token records for at most
//! [`TOKEN_TTL`] (a revocation holds everywhere within that), and counts each model call's tokens and each turn's
//! tool calls and times against the tenant's day ([`usage`]).

pub mod audit;
mod cache;
pub mod files;
pub mod token;
pub mod usage;

pub use cache::Tenancy;
pub use usage::{Spent, UsageRow};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The tenant of sessions made with the server's own token, and of every local command.
pub const DEFAULT_TENANT: &str = "default";
/// How long a checked token's record is trusted before it is read again: a revocation takes at most this long.
pub const TOKEN_TTL: Duration = Duration::from_millis(500);
/// How long a tenant's quota and the day's stored spending are trusted before they are read again.
pub(crate) const QUOTA_TTL: Duration = Duration::from_millis(500);
/// How often a token's `last_used_at` is written, at most.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// How long counted usage waits before it is written, so that busy turns make one write, not one per call.
pub(crate) const FLUSH_AFTER: Duration = Duration::from_millis(200);

/// Why a tenant operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    /// A tenant name that is not allowed.
    #[error("tenant name \"{0}\" is not valid: use 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit")]
    BadTenant(String),
    /// No token has this id.
    #[error("no token has the id \"{0}\"; `service-rs tokens list` shows them")]
    UnknownToken(String),
    /// The operating system gave no random bytes.
    #[error("cannot make a token: no random bytes from the system: {0}")]
    Random(String),
    /// The directory could not be read or written.
    #[error("{0}")]
    Store(String),
}

/// Result of a tenant operation.
pub type Result<T> = std::result::Result<T, TenancyError>;

/// Checks a tenant name: 1-63 of `[a-z0-9._-]`, starting with a letter or digit.
pub fn check_tenant(name: &str) -> Result<()> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(TenancyError::BadTenant(name.to_string()))
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Every tenant: sessions, tokens, quotas and grants (the server's own token, and `admin` tokens).
    Operator,
    /// Its own tenant's sessions, and its tokens other than operators'.
    TenantAdmin,
    /// Its own tenant's sessions.
    User,
    /// Its own tenant's sessions, read only: GET and HEAD requests.
    ReadOnly,
    /// `GET /metrics` and nothing else, for a scraper; the metrics cover every tenant, so only an operator makes
    /// one.
    Metrics,
}

impl Role {
    /// The role a record without one has: an `admin` token's is operator.
    pub fn of(stored: Option<Role>, admin: bool) -> Role {
        stored.unwrap_or(if admin { Role::Operator } else { Role::User })
    }

    /// Its name on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::TenantAdmin => "tenant-admin",
            Role::User => "user",
            Role::ReadOnly => "read-only",
            Role::Metrics => "metrics",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        [
            Role::Operator,
            Role::TenantAdmin,
            Role::User,
            Role::ReadOnly,
            Role::Metrics,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// A token as listings show it: everything but the token and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenView {
    /// Short public id.
    pub id: String,
    /// The tenant it speaks for.
    pub tenant: String,
    /// Whether it sees every tenant's sessions and may manage tokens: an operator.
    pub admin: bool,
    /// What it may do; absent on tokens made before roles, whose `admin` says operator or user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The operator's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// RFC 3339, written at most once a minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// RFC 3339: when it was revoked. A revoked token is kept for the record, with no digest it could match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// A stored token: what listings show, and the digest of the token, which itself is never kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Everything but the digest.
    #[serde(flatten)]
    pub token: TokenView,
    /// SHA-256 of the token, hex.
    pub sha256: String,
}

/// What a revoked token's digest becomes: no SHA-256 in hex, so no token matches it, on any release.
pub const REVOKED_DIGEST: &str = "revoked";

impl TokenRecord {
    /// Whether it has expired at `now`, or was revoked.
    pub fn expired(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.token.revoked_at.is_some()
            || self
                .token
                .expires_at
                .as_deref()
                .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
                .is_some_and(|e| e <= now)
    }
}

/// Bundles (`namespace/id`) granted, by tenant.
pub type Grants = BTreeMap<String, Vec<String>>;

/// A tenant's limits; each absent one is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Sessions it may have at once (subagents' sessions are not counted).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limit"
    )]
    #[schema(maximum = 9223372036854775807_u64)]
    pub sessions: Option<u64>,
    /// Turns it may run at once.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limit"
    )]
    #[schema(maximum = 9223372036854775807_u64)]
    pub concurrent_turns: Option<u64>,
    /// Tokens in and out it may spend in a UTC day.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limit"
    )]
    #[schema(maximum = 9223372036854775807_u64)]
    pub tokens_per_day: Option<u64>,
}

/// A limit as JSON may write it: a whole number (`5` or `5.0`, as JSON Schema's integers include both) up to
/// `i64::MAX`, which both stores keep, or null.
pub(crate) fn limit<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    use serde::de::Error;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let whole = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..9.223_372_036_854_775e18).contains(f))
            .map(|f| f as u64)
    });
    match whole {
        Some(v) if v <= i64::MAX as u64 => Ok(Some(v)),
        _ => Err(D::Error::custom(format!(
            "{n} is not a limit: a whole number from 0 to {}",
            i64::MAX
        ))),
    }
}

/// Where tokens, quotas and the usage ledger are kept: a files store's `tenants.json`, or PostgreSQL tables.
#[async_trait::async_trait]
pub trait Directory: Send + Sync {
    /// Stores a new token.
    async fn add_token(&self, record: &TokenRecord) -> Result<()>;
    /// Every token, oldest first.
    async fn tokens(&self) -> Result<Vec<TokenRecord>>;
    /// The token with this id.
    async fn token(&self, id: &str) -> Result<Option<TokenRecord>>;
    /// Revokes a token: it is kept, with `revoked_at` and no digest; false when none had the id or it was revoked.
    async fn revoke(&self, id: &str) -> Result<bool>;
    /// Records that a token was used at `when` (RFC 3339).
    async fn touch(&self, id: &str, when: &str) -> Result<()>;
    /// Sets (or, with every limit absent, clears) a tenant's quota.
    async fn set_quota(&self, tenant: &str, quota: &Quota) -> Result<()>;
    /// Every tenant's quota.
    async fn quotas(&self) -> Result<BTreeMap<String, Quota>>;
    /// Grants `tenant` the bundle `name` (`namespace/id`); false when it had it.
    async fn grant(&self, tenant: &str, name: &str) -> Result<bool>;
    /// Takes a grant back; false when there was none.
    async fn ungrant(&self, tenant: &str, name: &str) -> Result<bool>;
    /// Every tenant's granted bundles.
    async fn grants(&self) -> Result<Grants>;
    /// Makes `tenant` the owner of the bundle `name` (`namespace/id`) unless it has one: the owner it has now.
    async fn claim_name(&self, name: &str, tenant: &str) -> Result<String>;
    /// The tenant that owns the bundle `name`, if one does.
    async fn name_owner(&self, name: &str) -> Result<Option<String>>;
    /// Adds to the ledger: each row's sums to the row of the same tenant, day, model and bundle.
    async fn add_usage(&self, rows: &[UsageRow]) -> Result<()>;
    /// The ledger's rows of days `since` to `until` (`YYYY-MM-DD`, both included; None: to the last).
    async fn usage_between(&self, since: &str, until: Option<&str>) -> Result<Vec<UsageRow>>;
    /// Appends an entry to the audit log.
    async fn append_audit(&self, entry: &audit::AuditEntry) -> Result<()>;
    /// The last `limit` entries of the audit log, oldest first.
    async fn audit_tail(&self, limit: usize) -> Result<Vec<audit::AuditEntry>>;
}

/// A token just made: its record and the token itself, which is shown once and never stored.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    /// Its public id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Whether it is an admin token: an operator.
    pub admin: bool,
    /// What it may do.
    pub role: Role,
    /// The token.
    pub token: String,
    /// When it expires (RFC 3339), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Makes and stores a token for `tenant`, valid for `valid_for` (None: until revoked).
pub async fn create_token(
    dir: &dyn Directory,
    tenant: &str,
    role: Role,
    valid_for: Option<Duration>,
    label: Option<String>,
) -> Result<NewToken> {
    let admin = role == Role::Operator;
    check_tenant(tenant)?;
    let minted = token::mint().map_err(|e| TenancyError::Random(e.to_string()))?;
    let now = chrono::Utc::now();
    // A validity past the calendar's end (millions of years) is as good as none.
    let expires_at = valid_for
        .and_then(|d| chrono::Duration::from_std(d).ok())
        .and_then(|d| now.checked_add_signed(d))
        .filter(|t| chrono::Datelike::year(t) <= 9999)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let record = TokenRecord {
        token: TokenView {
            id: minted.id.clone(),
            tenant: tenant.to_string(),
            admin,
            role: Some(role),
            label,
            created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            expires_at: expires_at.clone(),
            last_used_at: None,
            revoked_at: None,
        },
        sha256: minted.sha256,
    };
    dir.add_token(&record).await?;
    Ok(NewToken {
        id: minted.id,
        tenant: tenant.to_string(),
        admin,
        role,
        token: minted.token,
        expires_at,
    })
}

/// Who a request speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Its tenant.
    pub tenant: String,
    /// Whether it sees every tenant: an operator.
    pub admin: bool,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// The server's own token, or a local command: the admin of the default tenant.
    pub fn operator() -> Caller {
        Caller::of(DEFAULT_TENANT, Role::Operator)
    }

    /// A caller of `tenant` with `role`.
    pub fn of(tenant: &str, role: Role) -> Caller {
        Caller {
            tenant: tenant.to_string(),
            admin: role == Role::Operator,
            role,
        }
    }

    /// Whether it may see a session of `tenant`.
    pub fn sees(&self, tenant: &str) -> bool {
        self.admin || self.tenant == tenant
    }

    /// The tenant a session it creates belongs to.
    pub fn owns(&self) -> Option<String> {
        (self.tenant != DEFAULT_TENANT).then(|| self.tenant.clone())
    }
}

/// The name a grant uses for a bundle reference: `namespace/id`, without a version, tag or digest; a bare name is
/// in the `local` namespace.
pub fn bundle_name(reference: &str) -> String {
    let reference = reference.split('@').next().unwrap_or(reference);
    // A tag follows the last ':' that comes after the last '/' (a registry's port comes before it).
    let cut = match (reference.rfind(':'), reference.rfind('/')) {
        (Some(colon), Some(slash)) if colon > slash => &reference[..colon],
        (Some(colon), None) => &reference[..colon],
        _ => reference,
    };
    if cut.contains('/') {
        cut.to_string()
    } else {
        format!("local/{cut}")
    }
}

/// Today as the ledger writes it: the UTC date.
pub fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_short_lower_case_words() {
        for ok in ["default", "acme", "team-a", "a.b_c", "0x"] {
            check_tenant(ok).unwrap();
        }
        for bad in ["", "Acme", "-a", "a b", "a/b", &"a".repeat(64), "é"] {
            assert!(check_tenant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_grant_names_a_bundle_without_its_version() {
        assert_eq!(bundle_name("hello"), "local/hello");
        assert_eq!(bundle_name("hello@latest"), "local/hello");
        assert_eq!(bundle_name("local/hello:0.1.0"), "local/hello");
        assert_eq!(
            bundle_name("127.0.0.1:5000/team/hello:1"),
            "127.0.0.1:5000/team/hello"
        );
        assert_eq!(
            bundle_name("ghcr.io/team/hello@sha256:ab"),
            "ghcr.io/team/hello"
        );
    }

    #[test]
    fn a_tenant_caller_sees_only_its_own_and_an_admin_sees_all() {
        let acme = Caller::of("acme", Role::User);
        assert!(acme.sees("acme") && !acme.sees("default"));
        assert!(Caller::operator().sees("acme"));
        assert_eq!(acme.owns().as_deref(), Some("acme"));
        assert_eq!(Caller::operator().owns(), None);
    }
}

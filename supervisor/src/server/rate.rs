//! Per-tenant request rates (`serve --tenant-request-rate 20/s`, `--tenant-request-rate-for acme=100/s`): a tenant
//! over its rate gets 429 `rate_limited` with `Retry-After`, so one tenant's script cannot crowd out the others.
//!
//! The limit is a GCRA cell per tenant (`governor`): a tenant may send its whole rate at once, then one request per
//! interval. Each node counts the requests clients sent it; a request another node forwarded was counted there.
//! Operators (the server token, operator tokens) are never limited, so they can act while tenants are throttled.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};

/// A rate as written: `N/s`, `N/m` or `N/h`, N requests at most in that time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests in one `per`.
    pub requests: NonZeroU32,
    /// The period.
    pub per: Duration,
}

impl Rate {
    /// Parses `N/s`, `N/m` or `N/h` (`second`, `minute`, `hour` spelled out work too).
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || format!("{text}: write a rate as N/s, N/m or N/h, such as 20/s or 600/m");
        let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let requests = n
            .trim()
            .parse::<u32>()
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(bad)?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        Ok(Rate { requests, per })
    }

    fn quota(self) -> Quota {
        // At least a nanosecond between requests, which any rate written above gives.
        let interval = (self.per / self.requests.get()).max(Duration::from_nanos(1));
        Quota::with_period(interval)
            .unwrap_or_else(|| Quota::per_second(self.requests))
            .allow_burst(self.requests)
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "second",
            60 => "minute",
            _ => "hour",
        };
        write!(f, "{} a {unit}", self.requests)
    }
}

/// The rates in force: one for every tenant, and some tenants' own.
#[derive(Debug, Clone, Default)]
pub struct RequestRates {
    /// Every tenant's rate (`--tenant-request-rate`); None: no limit but a tenant's own.
    pub default: Option<Rate>,
    /// Tenants' own rates (`--tenant-request-rate-for TENANT=RATE`), which win over the default.
    pub tenants: HashMap<String, Rate>,
}

impl RequestRates {
    fn of(&self, tenant: &str) -> Option<Rate> {
        self.tenants.get(tenant).copied().or(self.default)
    }

    /// Whether any limit is set.
    pub fn is_on(&self) -> bool {
        self.default.is_some() || !self.tenants.is_empty()
    }
}

/// The cells of the tenants that have sent requests.
#[derive(Default)]
pub struct TenantLimiter {
    cells: Mutex<HashMap<String, Arc<DefaultDirectRateLimiter>>>,
}

/// A refusal: the rate it was over, and when the next request will be taken.
#[derive(Debug)]
pub struct OverRate {
    /// The tenant's rate.
    pub rate: Rate,
    /// Time until a request is taken again.
    pub retry_after: Duration,
}

impl TenantLimiter {
    /// Takes one request of `tenant`, or says when it may send the next.
    pub fn take(&self, rates: &RequestRates, tenant: &str) -> Result<(), OverRate> {
        let Some(rate) = rates.of(tenant) else {
            return Ok(());
        };
        let cell = {
            let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
            cells
                .entry(tenant.to_string())
                .or_insert_with(|| Arc::new(DefaultDirectRateLimiter::direct(rate.quota())))
                .clone()
        };
        cell.check().map_err(|not_until| OverRate {
            rate,
            retry_after: not_until.wait_time_from(DefaultClock::default().now()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_written_and_bad_ones_say_how_to_write_them() {
        let r = Rate::parse("20/s").unwrap();
        assert_eq!((r.requests.get(), r.per), (20, Duration::from_secs(1)));
        assert_eq!(
            Rate::parse(" 600 / minute ").unwrap().per,
            Duration::from_secs(60)
        );
        for bad in ["20", "0/s", "-1/s", "20/d", "x/s", ""] {
            assert!(Rate::parse(bad).unwrap_err().contains("N/s"), "{bad}");
        }
    }

    #[test]
    fn a_tenant_gets_its_burst_then_waits_while_others_and_the_unlimited_go_on() {
        let rates = RequestRates {
            default: Some(Rate::parse("3/m").unwrap()),
            tenants: [("big".to_string(), Rate::parse("5/m").unwrap())].into(),
        };
        let limiter = TenantLimiter::default();
        for _ in 0..3 {
            limiter.take(&rates, "acme").unwrap();
        }
        let over = limiter.take(&rates, "acme").unwrap_err();
        assert!(
            over.retry_after > Duration::from_secs(15)
                && over.retry_after <= Duration::from_secs(20)
        );
        for _ in 0..5 {
            limiter.take(&rates, "big").unwrap();
        }
        assert!(limiter.take(&rates, "big").is_err());
        limiter.take(&rates, "beta").unwrap();
        let none = RequestRates::default();
        for _ in 0..100 {
            limiter.take(&none, "acme").unwrap();
        }
    }
}

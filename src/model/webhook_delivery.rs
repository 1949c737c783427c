//! A webhook delivery: one notification (a run's end, a test's, a sweep's) on its way to one
//! webhook, kept in the store's outbox until it is delivered, refused or out of time.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Millis, UnknownState};

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    /// Not yet delivered: due at `next_at`, or being posted.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Refused for good (a 4xx other than 408/429, an unusable URL) or out of retry time;
    /// `lachesis webhooks resend` sends it again.
    Failed,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] =
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DeliveryState {
    type Err = UnknownState;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DeliveryState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| UnknownState::new("delivery", text, DeliveryState::ALL.map(DeliveryState::as_str)))
    }
}

/// One delivery as the store keeps it. `target` is the webhook's URL redacted; the URL itself
/// is kept only when the store holds it anyway (a schedule's webhook), else found again by its
/// digest among the daemon's `LACHESIS_WEBHOOKS`, so no token of theirs is ever stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// The delivery id the receiver sees (`X-Lachesis-Delivery`, the body's `delivery_id`).
    pub id: Uuid,
    /// Its notification's place: a subject's deliveries to one target go out in this order.
    pub seq: i64,
    /// The run, test or sweep it is about.
    pub subject: String,
    /// The payload's kind (`run_completed`, …).
    pub event: String,
    /// The webhook's URL, credentials and query redacted.
    pub target: String,
    /// SHA-256 of the URL (`webhooks::target_key`): the order's key, and how the daemon finds it.
    #[serde(skip)]
    pub target_key: String,
    /// The URL itself, for a schedule's webhook; never shown.
    #[serde(skip)]
    pub target_url: Option<String>,
    pub state: DeliveryState,
    /// POSTs made.
    pub attempts: i64,
    /// When a pending one is due next.
    pub next_at: Millis,
    /// When its retry window opened (its fan-out, or a resend).
    pub since: Millis,
    /// The last answer's HTTP status, if one came back.
    pub last_status: Option<i64>,
    /// The last answer: status and a bounded excerpt of the body, or the error.
    pub last_answer: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl WebhookDelivery {
    pub fn short_id(&self) -> String {
        super::short_id(&self.id)
    }
}

/// What one attempt at a delivery leaves in the store.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryAttempt {
    /// `Pending` again (due at `next_at`), `Delivered` or `Failed`.
    pub state: DeliveryState,
    pub next_at: Millis,
    pub status: Option<u16>,
    pub answer: String,
    /// The event written on the subject (a run's or test's) when the delivery ends.
    pub event: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_and_refuse_others() {
        for state in DeliveryState::ALL {
            assert_eq!(state.as_str().parse::<DeliveryState>().unwrap(), state);
        }
        let err = "lost".parse::<DeliveryState>().unwrap_err().to_string();
        assert_eq!(err, "unknown delivery state 'lost' (expected one of: pending, delivered, failed)");
    }
}

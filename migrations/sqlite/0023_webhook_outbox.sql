-- Webhooks that are never lost (issue 40): a notification is written in the transaction of the
-- move that causes it, then fanned out by a daemon into one delivery per webhook and posted
-- from there until it is delivered, refused or out of time. The URLs of LACHESIS_WEBHOOKS carry
-- tokens and live in the daemon's environment: a delivery keeps only their digest and redacted form.
CREATE TABLE webhook_notifications (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT, -- the order of a subject's notifications
    subject    TEXT    NOT NULL,                  -- the run, test or sweep it is about
    event      TEXT    NOT NULL,                  -- the payload's kind
    payload    TEXT    NOT NULL,                  -- the JSON body, without its delivery id
    targets    TEXT,                              -- JSON list of URLs; NULL: the daemon's LACHESIS_WEBHOOKS
    created_at BIGINT  NOT NULL
);

CREATE TABLE webhook_deliveries (
    id          TEXT    PRIMARY KEY,     -- the delivery id the receiver sees (UUID)
    seq         BIGINT  NOT NULL,        -- its notification's: the order per subject and target
    subject     TEXT    NOT NULL,
    event       TEXT    NOT NULL,
    target      TEXT    NOT NULL,        -- the webhook's URL as shown: credentials and query redacted
    target_key  TEXT    NOT NULL,        -- SHA-256 of the URL: the daemon finds LACHESIS_WEBHOOKS' by it
    target_url  TEXT,                    -- the URL when the store holds it anyway (a schedule's); NULL otherwise
    payload     TEXT    NOT NULL,
    state       TEXT    NOT NULL,        -- pending, delivered, failed
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     BIGINT  NOT NULL,        -- when a pending one is due (or its poster's lease ends)
    since       BIGINT  NOT NULL,        -- when its retry window opened (fan-out or resend)
    last_status INTEGER,
    last_answer TEXT,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries (subject, target_key, seq);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (seq, id);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (state, updated_at);

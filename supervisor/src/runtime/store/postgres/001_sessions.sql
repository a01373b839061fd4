-- Sessions, their events, history and owners. Records and events are JSON text, exactly as the files store keeps
-- them, so every node hands a client the same bytes.
CREATE TABLE sessions (
    id            text PRIMARY KEY,
    record        text NOT NULL,
    created_at    text NOT NULL,
    -- The last sequence number given out; raised inside the transaction that inserts the events.
    last_seq      bigint NOT NULL DEFAULT 0,
    journal_bytes bigint NOT NULL DEFAULT 0
);

CREATE TABLE events (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    body       text NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE history (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    n          bigserial,
    message    text NOT NULL,
    PRIMARY KEY (session_id, n)
);

CREATE TABLE owners (
    session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    node_id    text NOT NULL,
    url        text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX owners_by_node ON owners (node_id);

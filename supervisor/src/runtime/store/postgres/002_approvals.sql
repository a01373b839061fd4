-- Which session asked each approval request, so that an operator's answer reaching any node goes to the node running
-- that session. Rows are written in the transaction that stores the request's event: a client can only learn a
-- request id from that event, so the row is always there first.
CREATE TABLE approvals (
    request_id text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE
);

-- The operator's allow_always answers, per session: the node that takes a session over keeps asking nothing that
-- was already allowed. They end with the session.
CREATE TABLE grants (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    grant_json text NOT NULL,
    PRIMARY KEY (session_id, grant_json)
);

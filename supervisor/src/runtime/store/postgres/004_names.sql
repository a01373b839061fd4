-- Names clients give sessions and their turns (an A2A context id, a task id): any node finds the session a name
-- points at. The first session to take a name keeps it; the names end with the session.
CREATE TABLE names (
    name       text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE
);
CREATE INDEX names_by_session ON names (session_id);

-- The ops console's own tables: operators (local users for development; production puts an
-- OIDC provider in front, docs/adr/0011), their sessions, and the audit of every operator act.

CREATE TABLE operators (
    username      text PRIMARY KEY CHECK (username ~ '^[a-z][a-z0-9_.-]{1,31}$'),
    display_name  text NOT NULL CHECK (length(display_name) BETWEEN 1 AND 80),
    password_hash text NOT NULL,                     -- argon2id, never the password
    permissions   text[] NOT NULL DEFAULT '{}',
    merchants     text[] NOT NULL DEFAULT '{}',      -- the merchants whose payments this operator may see
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sessions (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),  -- the cookie's hash, never the cookie
    username     text NOT NULL REFERENCES operators (username),
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);

CREATE TABLE audit (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    operator  text NOT NULL,             -- a username, or '(anonymous)' for a refused login
    action    text NOT NULL,
    target    text NOT NULL DEFAULT '',
    reason    text NOT NULL DEFAULT '',
    outcome   text NOT NULL CHECK (outcome IN ('ok', 'refused', 'failed')),
    detail    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_at ON audit (at DESC);

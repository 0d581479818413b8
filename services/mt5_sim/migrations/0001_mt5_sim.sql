-- The simulated MT5 server's state: groups (currency, digits), accounts, deals.
-- A balance deal and the balance change commit in one transaction (see adapters/store.py).
-- Deal tickets come from one sequence: unique, increasing, never reused (reset keeps the sequence).

CREATE TABLE mt5_groups (
    name            text    PRIMARY KEY CHECK (name <> '' AND char_length(name) <= 64),
    currency        text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    currency_digits integer NOT NULL CHECK (currency_digits BETWEEN 0 AND 8)
);

CREATE TABLE mt5_accounts (
    login        bigint         PRIMARY KEY CHECK (login > 0),
    group_name   text           NOT NULL REFERENCES mt5_groups (name),
    rights       bigint         NOT NULL CHECK (rights >= 0),
    name         text           NOT NULL DEFAULT '',
    leverage     integer        NOT NULL DEFAULT 100 CHECK (leverage > 0),
    balance      numeric(38, 8) NOT NULL,
    credit       numeric(38, 8) NOT NULL DEFAULT 0 CHECK (credit >= 0),
    margin       numeric(38, 8) NOT NULL DEFAULT 0 CHECK (margin >= 0),
    registered_s bigint         NOT NULL
);

CREATE SEQUENCE mt5_deal_ticket AS bigint START WITH 100001 NO CYCLE;

CREATE TABLE mt5_deals (
    deal            bigint         PRIMARY KEY,
    login           bigint         NOT NULL REFERENCES mt5_accounts (login),
    action          integer        NOT NULL CHECK (action BETWEEN 0 AND 20),
    amount          numeric(38, 8) NOT NULL,
    comment         text           NOT NULL CHECK (char_length(comment) <= 31),
    time_msc        bigint         NOT NULL,
    digits_currency integer        NOT NULL CHECK (digits_currency BETWEEN 0 AND 8),
    dealer          bigint         NOT NULL DEFAULT 0,
    created_at      timestamptz    NOT NULL DEFAULT now()
);

-- Every history query is "this login, this time window, in ticket order".
CREATE INDEX mt5_deals_login_time ON mt5_deals (login, time_msc, deal);

-- What the control API armed (faults with what they have fired, the clock offset): kept so that a
-- simulator restarted in the middle of a drill still misbehaves exactly as the drill asked. One
-- JSON document per name, rewritten whole on every change; reset empties it.
CREATE TABLE mt5_control_state (
    name       text        PRIMARY KEY,
    state      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

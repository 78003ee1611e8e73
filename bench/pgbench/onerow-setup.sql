-- Issue 27 spike (RESULTS.md, run 15): "lazy deliveries with a transaction-id cursor".
-- Tables of both designs under the prefix spk_ (database `test`), no library involved:
--   spk3_*  schema 3 as lib/stores/typeorm/dialects/postgres/ddl.ts creates it (event + delivery
--           at append, the claim index, the events' available_at index);
--   spk1_*  the spike: the event row carries the id of the transaction that appended it
--           (`tx xid8`, the column default), indexed with seq; no available_at index; deliveries as
--           in schema 3, created by the claimer (materialisation) from a one-row cursor;
--   spk_orders / spk_raw: the business row and the hand-rolled outbox table of bench/pgbench.
DROP TABLE IF EXISTS spk3_events, spk3_deliveries, spk1_events, spk1_deliveries, spk1_cursor,
  spk1_ahead, spk_orders, spk_raw;

CREATE TABLE spk_orders (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE spk_raw (id UUID PRIMARY KEY, type VARCHAR(255) NOT NULL, event_key VARCHAR(512), payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(), processed_at TIMESTAMPTZ);

-- Schema 3 (verbatim shape of ddl.ts).
CREATE TABLE spk3_events (
  seq BIGSERIAL PRIMARY KEY,
  id UUID NOT NULL,
  type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  payload JSON NOT NULL,
  headers JSON NOT NULL,
  occurred_at TIMESTAMPTZ(3) NOT NULL,
  available_at TIMESTAMPTZ(3) NOT NULL,
  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
  CONSTRAINT spk3_events_id_uq UNIQUE (id)
);
CREATE INDEX spk3_events_available_idx ON spk3_events (available_at);
CREATE TABLE spk3_deliveries (
  id UUID PRIMARY KEY,
  event_seq BIGINT NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  handler VARCHAR(255) NOT NULL,
  status VARCHAR(16) NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  available_at TIMESTAMPTZ(3) NOT NULL,
  lease_owner VARCHAR(255),
  lease_token VARCHAR(64),
  lease_until TIMESTAMPTZ(3),
  reason VARCHAR(16),
  errors JSONB NOT NULL DEFAULT '[]',
  done_at TIMESTAMPTZ(3),
  CONSTRAINT spk3_deliveries_event_handler_uq UNIQUE (event_seq, handler)
);
CREATE INDEX spk3_deliveries_claim_idx ON spk3_deliveries (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased');
CREATE INDEX spk3_deliveries_key_idx ON spk3_deliveries (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL;

-- The spike: one row at append (primary key, id, (tx, seq): 3 index entries).
CREATE TABLE spk1_events (
  seq BIGSERIAL PRIMARY KEY,
  id UUID NOT NULL,
  type VARCHAR(255) NOT NULL,
  event_key VARCHAR(512),
  payload JSON NOT NULL,
  headers JSON NOT NULL,
  occurred_at TIMESTAMPTZ(3) NOT NULL,
  available_at TIMESTAMPTZ(3) NOT NULL,
  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
  tx XID8 NOT NULL DEFAULT pg_current_xact_id(),
  -- Only the `ours1h` append variant fills it (the appender's handler names, for fan-out the
  -- claimer cannot know); NULL otherwise.
  handlers TEXT[],
  CONSTRAINT spk1_events_id_uq UNIQUE (id)
);
CREATE INDEX spk1_events_tx_idx ON spk1_events (tx, seq);
-- Deliveries as in schema 3 (the materialiser writes them; the claim and the ack are unchanged).
CREATE TABLE spk1_deliveries (LIKE spk3_deliveries INCLUDING DEFAULTS);
ALTER TABLE spk1_deliveries ADD PRIMARY KEY (id), ADD CONSTRAINT spk1_deliveries_event_handler_uq UNIQUE (event_seq, handler);
CREATE INDEX spk1_deliveries_claim_idx ON spk1_deliveries (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased');
CREATE INDEX spk1_deliveries_key_idx ON spk1_deliveries (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL;
-- (tx, seq) of the last event materialised; one row, locked by the one claimer materialising.
CREATE TABLE spk1_cursor (id INT PRIMARY KEY, tx XID8 NOT NULL, seq BIGINT NOT NULL);
INSERT INTO spk1_cursor VALUES (1, '0'::xid8, 0);
-- Fallback of run 15 (c): events materialised ahead of the cursor while a long writer holds xmin.
CREATE TABLE spk1_ahead (seq BIGINT PRIMARY KEY, tx XID8 NOT NULL);
-- UUID version 7 (time first), as lib/ids.ts makes them, for ids the database makes here.
CREATE OR REPLACE FUNCTION spk_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
    substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
    52, 1), 53, 1), 'hex')::uuid
$$;

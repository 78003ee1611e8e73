-- Run 17 (issue 27, append side): schema 3's tables and variants with fewer index entries, made by
-- SQL in a database of its own (bench/pgbench/idx-append.sh). Prefixes:
--   ia_  schema 3 as lib/stores/typeorm/dialects/postgres/ddl.ts creates it (a)
--   ib_  without events_available_idx (b)
--   ic_  deliveries' unique index as (handler, event_seq) instead of (event_seq, handler) (c)
--   im_  the unique (handler, event_seq) INCLUDE (...) index is the claim index: one index where
--        schema 3 has the unique constraint and the partial claim index (deliveries hold open
--        rows only since schema 2, so the claim index's predicate holds for every row) (m)
--   ibm_ b and m together
DROP TABLE IF EXISTS idx_orders, idx_raw CASCADE;
CREATE TABLE idx_orders (id UUID PRIMARY KEY, total INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE idx_raw (id UUID PRIMARY KEY, type VARCHAR(255) NOT NULL, event_key VARCHAR(512), payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(), processed_at TIMESTAMPTZ);

CREATE OR REPLACE FUNCTION idx_make(p text, avail_idx boolean, uq text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DROP TABLE IF EXISTS %1$sevents, %1$sdeliveries, %1$sdead_letters', p);
  EXECUTE format($f$CREATE TABLE %1$sevents (
    seq BIGSERIAL PRIMARY KEY, id UUID NOT NULL, type VARCHAR(255) NOT NULL, event_key VARCHAR(512),
    payload JSON NOT NULL, headers JSON NOT NULL, occurred_at TIMESTAMPTZ(3) NOT NULL,
    available_at TIMESTAMPTZ(3) NOT NULL, created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),
    CONSTRAINT %1$sevents_id_uq UNIQUE (id))$f$, p);
  EXECUTE format($f$CREATE TABLE %1$sdeliveries (
    id UUID PRIMARY KEY, event_seq BIGINT NOT NULL, event_type VARCHAR(255) NOT NULL, event_key VARCHAR(512),
    handler VARCHAR(255) NOT NULL, status VARCHAR(16) NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    available_at TIMESTAMPTZ(3) NOT NULL, lease_owner VARCHAR(255), lease_token VARCHAR(64),
    lease_until TIMESTAMPTZ(3), reason VARCHAR(16), errors JSONB NOT NULL DEFAULT '[]', done_at TIMESTAMPTZ(3))$f$, p);
  IF uq = 'event_handler' THEN
    EXECUTE format('ALTER TABLE %1$sdeliveries ADD CONSTRAINT %1$sdeliveries_event_handler_uq UNIQUE (event_seq, handler)', p);
  ELSIF uq = 'handler_event' THEN
    EXECUTE format('ALTER TABLE %1$sdeliveries ADD CONSTRAINT %1$sdeliveries_handler_event_uq UNIQUE (handler, event_seq)', p);
  END IF;
  IF uq = 'merged' THEN
    EXECUTE format('ALTER TABLE %1$sdeliveries ADD CONSTRAINT %1$sdeliveries_claim_uq UNIQUE (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key)', p);
  ELSE
    EXECUTE format($f$CREATE INDEX %1$sdeliveries_claim_idx ON %1$sdeliveries (handler, event_seq) INCLUDE (id, status, available_at, lease_until, event_key) WHERE status IN ('pending', 'leased')$f$, p);
  END IF;
  EXECUTE format($f$CREATE INDEX %1$sdeliveries_key_idx ON %1$sdeliveries (handler, event_key, event_seq) WHERE status IN ('pending', 'leased') AND event_key IS NOT NULL$f$, p);
  EXECUTE format($f$CREATE TABLE %1$sdead_letters (id UUID PRIMARY KEY, event_seq BIGINT NOT NULL, event_type VARCHAR(255) NOT NULL,
    event_key VARCHAR(512), handler VARCHAR(255) NOT NULL, attempts INTEGER NOT NULL, reason VARCHAR(16) NOT NULL,
    errors JSONB NOT NULL DEFAULT '[]', dead_at TIMESTAMPTZ(3) NOT NULL)$f$, p);
  EXECUTE format('CREATE INDEX %1$sdead_letters_dead_idx ON %1$sdead_letters (dead_at, id)', p);
  EXECUTE format('CREATE INDEX %1$sdead_letters_event_idx ON %1$sdead_letters (event_seq)', p);
  IF avail_idx THEN
    EXECUTE format('CREATE INDEX %1$sevents_available_idx ON %1$sevents (available_at)', p);
  END IF;
END $$;
SELECT idx_make('ia_', true, 'event_handler');
SELECT idx_make('ib_', false, 'event_handler');
SELECT idx_make('ic_', true, 'handler_event');
SELECT idx_make('im_', true, 'merged');
SELECT idx_make('ibm_', false, 'merged');

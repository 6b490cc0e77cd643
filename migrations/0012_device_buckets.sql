-- Each device bucket keeps one persisted wake-up for all its devices (src/entities/DeviceBucket.ts):
-- a bucket's new owner finds its devices with a pending deadline by this column. Rows written
-- before it get their bucket here: `bucketOf` in src/entities/protocol.ts (FNV-1a over the id's
-- UTF-16 code units, modulo 1,024 buckets).
ALTER TABLE device_actors ADD COLUMN bucket text;
CREATE INDEX device_actors_bucket_timed ON device_actors (bucket) WHERE wake_at IS NOT NULL;
CREATE FUNCTION voltaic_bucket_of(id text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h bigint := 2166136261;
  i int;
BEGIN
  FOR i IN 1..length(id) LOOP
    h := ((h # ascii(substr(id, i, 1))) * 16777619) & 4294967295;
  END LOOP;
  RETURN 'b' || (h % 1024)::text;
END $$;
UPDATE device_actors SET bucket = voltaic_bucket_of(device_id);
DROP FUNCTION voltaic_bucket_of(text);
-- An alert bucket reads each slot's newest alert, open or not (src/entities/alertSlot.ts): without
-- this, every slot read scanned the alerts table.
CREATE INDEX alerts_slot ON alerts (alert_rule_id, device_id, last_seen_at DESC);

-- Devices are hosted in 64 buckets, not 1,024 (src/entities/protocol.ts, `BUCKETS`): each device-bucket step,
-- and each message to one, has a fixed cost in the cluster, so fewer and fuller buckets cost less per event
-- ingested and per offline alert of a burst (bench/RESULTS.md, 2026-11-26). The rows' bucket follows `bucketOf`
-- (FNV-1a over the id's UTF-16 code units, now modulo 64). A persisted message still addressed to a bucket of the
-- old count (an acknowledge or resolve in flight during the upgrade) is handled by that bucket's entity from the
-- alert's row, as any message to a bucket is.
CREATE FUNCTION voltaic_bucket_of(id text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h bigint := 2166136261;
  i int;
BEGIN
  FOR i IN 1..length(id) LOOP
    h := ((h # ascii(substr(id, i, 1))) * 16777619) & 4294967295;
  END LOOP;
  RETURN 'b' || (h % 64)::text;
END $$;
UPDATE device_actors SET bucket = voltaic_bucket_of(device_id);
DROP FUNCTION voltaic_bucket_of(text);

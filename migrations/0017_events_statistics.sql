-- ANALYZE of events samples 300 rows per unit of its largest column statistics target (default 100:
-- 30,000 rows), and builds statistics for every column, `data`'s jsonb the dearest. On PGlite that
-- ANALYZE runs on the store's one thread (src/store/maintenance.ts, after each 20 % of new events) and
-- holds every other statement meanwhile: 180-253 ms at 300,000 events, which a command run or an
-- acknowledgement waiting behind it took as its latency. Events are read by device, name and time
-- (the indexes events_device_time and events_device_name_time), never by data, id ranges, receipt time
-- or protocol: those columns get no statistics, the others a target of 10 (3,000 rows sampled).
-- PGlite, 300,000 events: ANALYZE 253 → 20 ms; the plans and row estimates of GET /events by device,
-- by device, name and time, its count, and by organisation alone are the same as with the default.
ALTER TABLE events
  ALTER COLUMN data SET STATISTICS 0,
  ALTER COLUMN id SET STATISTICS 0,
  ALTER COLUMN received_at SET STATISTICS 0,
  ALTER COLUMN protocol SET STATISTICS 0,
  ALTER COLUMN organisation_id SET STATISTICS 10,
  ALTER COLUMN device_id SET STATISTICS 10,
  ALTER COLUMN name SET STATISTICS 10,
  ALTER COLUMN timestamp SET STATISTICS 10,
  ALTER COLUMN has_file SET STATISTICS 10;

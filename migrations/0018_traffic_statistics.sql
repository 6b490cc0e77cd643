-- 0017's reasoning for the other tables devices append to. On PGlite, ANALYZE runs on the store's
-- one thread (src/store/maintenance.ts, autovacuum's rules once a minute) and holds every other
-- statement meanwhile; with the default targets it samples 30,000 rows and builds statistics for
-- every column. bench:ingest's PGlite MQTT command case met the minute pass's
-- `VACUUM (ANALYZE) command_runs` (~43,000 new runs): 199 ms, 165 runs delayed over 50 ms, p99 24.7 ms.
-- ANALYZE alone, PGlite on disk, 50,000 rows: command_runs 131-202 → 8 ms, locations 99-147 → 6 ms,
-- energy_readings 53 → 27 ms.
--
-- - command_runs are only written, and deleted with their command (by command_runs_command_time):
--   statistics for the indexed columns and the ids a future read would filter on, from a 3,000-row sample.
-- - locations are read as events are, by organisation, device and time: the same targets as events'.
-- - energy_readings are read by series and time range, on 100 million rows on Postgres: those two
--   columns keep the default (their plans are not re-measured here); the quantity and the event
--   id, never filtered on, get none.
ALTER TABLE command_runs
  ALTER COLUMN id SET STATISTICS 0,
  ALTER COLUMN data SET STATISTICS 0,
  ALTER COLUMN protocol SET STATISTICS 0,
  ALTER COLUMN organisation_id SET STATISTICS 10,
  ALTER COLUMN command_id SET STATISTICS 10,
  ALTER COLUMN device_id SET STATISTICS 10,
  ALTER COLUMN timestamp SET STATISTICS 10;

ALTER TABLE locations
  ALTER COLUMN id SET STATISTICS 0,
  ALTER COLUMN latitude SET STATISTICS 0,
  ALTER COLUMN longitude SET STATISTICS 0,
  ALTER COLUMN altitude SET STATISTICS 0,
  ALTER COLUMN received_at SET STATISTICS 0,
  ALTER COLUMN protocol SET STATISTICS 0,
  ALTER COLUMN organisation_id SET STATISTICS 10,
  ALTER COLUMN device_id SET STATISTICS 10,
  ALTER COLUMN timestamp SET STATISTICS 10;

ALTER TABLE energy_readings
  ALTER COLUMN quantity SET STATISTICS 0,
  ALTER COLUMN event_id SET STATISTICS 0;

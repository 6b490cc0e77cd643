-- Raw readings indexed with their quantity: the `(series_id, timestamp)` index carries `quantity` (INCLUDE), so
-- a query reading raw readings — a device breakdown by hour (device series have no hourly rollup, src/energy/plan.ts),
-- the raw edges of a 30-minute zone, `rollups=false` — is answered from the index alone (an index-only scan once
-- VACUUM has marked the pages all-visible): a device's readings of a day sit side by side on one leaf page, where
-- the heap holds them on a page per bulk-import request. Measured against the plain index in the same run at 100M
-- readings (bench/RESULTS.md, "Energy"). Rebuilding the index reads the whole table and holds off writers meanwhile.
CREATE INDEX energy_readings_series_time_quantity ON energy_readings (series_id, timestamp) INCLUDE (quantity);
DROP INDEX energy_readings_series_time;
ALTER INDEX energy_readings_series_time_quantity RENAME TO energy_readings_series_time;

-- A small batch's devices are marked seen one by one, each found through the primary key.
-- The writer's statement for a batch (src/store/batch.ts) moves each of its devices' last_seen_at
-- forward. As one set-based UPDATE, Postgres's planner finds the devices by scanning the whole
-- `devices` table whenever the table is small (at 1,000 rows and the default random_page_cost a scan
-- of its 28 pages is estimated cheaper than ten index probes), and a batch of ten events from ten
-- devices of a thousand paid two scans of 1,000 rows (the locking pass and the update). This function
-- updates each device by its id, in id order: each row is locked as it is updated, in the order every
-- other writer of devices locks them (no separate locking pass), and a one-row update by key is always
-- planned as an index probe.
-- bench:store, Postgres, 10-event batches over 1,000 devices, backend CPU per event: 71.8 µs against
-- 111.8 for the former statement (bench/RESULTS.md, session 40).
-- Large batches stay set-based (a join): one probe per device costs more there than one scan.
CREATE FUNCTION devices_seen(seen json) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  device record;
BEGIN
  FOR device IN SELECT s.id, s.at FROM json_to_recordset(seen) AS s(id text, at int8) ORDER BY s.id LOOP
    UPDATE devices SET last_seen_at = GREATEST(COALESCE(last_seen_at, 0), device.at) WHERE id = device.id;
  END LOOP;
END
$$;

-- A device's lastSeenAt moves out of `devices` into a narrow table of its own, `device_seen`.
-- Every stored batch of events moves its devices' lastSeenAt forward (src/store/batch.ts): as a
-- column of `devices`, each of those updates copied the device's whole row (its JSON state, meta,
-- radio settings) into a new version, wrote that version to the WAL, and ran the row's constraint
-- trigger `devices_key_changed` (migrations/0007) to compare its key columns. A row of two columns
-- and one index costs a fraction of that. bench:store, 10-event statements over 1,000 devices
-- (bench/RESULTS.md, session 41): Postgres's backend CPU per event 33.7 µs against 39.0 with the
-- column back in `devices` (the variant "lastSeenAt in devices (before 0021)"); PGlite's thread
-- 79.2 against 86.0 µs per event.
--
-- Every device has its row, made by the statement that makes the device and deleted with it.
-- Its pages keep half their room free: an update stays on its page (a heap-only update, no new
-- index entry), and Postgres's autovacuum or src/store/maintenance.ts (PGlite) make the old
-- versions' room reusable.
CREATE TABLE device_seen (
  device_id    text PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
  last_seen_at bigint
) WITH (fillfactor = 50);

INSERT INTO device_seen (device_id, last_seen_at) SELECT id, last_seen_at FROM devices;

CREATE FUNCTION devices_inserted_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO device_seen (device_id) SELECT id FROM new_devices;
  RETURN NULL;
END
$$;
CREATE TRIGGER devices_inserted_seen AFTER INSERT ON devices
  REFERENCING NEW TABLE AS new_devices FOR EACH STATEMENT EXECUTE FUNCTION devices_inserted_seen();

ALTER TABLE devices DROP COLUMN last_seen_at;

-- The writer's statement for a batch of plain events on Postgres: the events inserted, then their
-- devices marked seen. One function, so that the two run in this order: the insert's device check
-- (migrations/0016) locks each device's `devices` row (KEY SHARE) at the end of the insert, before
-- any `device_seen` row is locked, which is the order a device's deletion takes them in (its
-- `devices` row, then its `device_seen` row by the cascade). As one statement with the insert in a
-- CTE, the check ran at the statement's end, after the updates: a deletion of one of the batch's
-- devices meanwhile could deadlock with it.
-- `one_by_one` (a batch from a few devices, src/store/batch.ts's DEVICES_ONE_BY_ONE): each device
-- updated by its key, in id order (0020's reason: as a join, Postgres scans a small table whole).
-- Otherwise by a join, its rows locked in id order first, as every other writer of them does.
DROP FUNCTION devices_seen(json);

CREATE FUNCTION events_written(events json, seen json, one_by_one boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  device record;
BEGIN
  INSERT INTO events (id, organisation_id, device_id, name, data, timestamp, received_at, protocol, has_file)
    SELECT u.id, u.org, u.dev, u.name, (u.data -> 0)::jsonb, u.ts, u.rcv, u.proto, false
    FROM json_to_recordset(events) AS u(id text, org text, dev text, name text, data json, ts int8, rcv int8, proto text);
  IF one_by_one THEN
    FOR device IN SELECT s.id, s.at FROM json_to_recordset(seen) AS s(id text, at int8) ORDER BY s.id LOOP
      UPDATE device_seen SET last_seen_at = GREATEST(COALESCE(last_seen_at, 0), device.at) WHERE device_id = device.id;
    END LOOP;
  ELSE
    WITH s AS (SELECT * FROM json_to_recordset(seen) AS s(id text, at int8)),
      locked AS (SELECT ds.device_id, s.at FROM device_seen ds JOIN s ON ds.device_id = s.id
                 ORDER BY ds.device_id FOR NO KEY UPDATE OF ds)
    UPDATE device_seen ds SET last_seen_at = GREATEST(COALESCE(ds.last_seen_at, 0), locked.at)
      FROM locked WHERE ds.device_id = locked.device_id;
  END IF;
END
$$;

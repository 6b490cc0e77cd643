-- An event's device is checked once per statement instead of once per row. The foreign key ran a
-- query per inserted event (find the device, lock it KEY SHARE): on PGlite, whose one thread bounds
-- MQTT QoS 0 ingest, that was the largest single part of a stored event. The same guarantees hold:
-- - an event names a device that exists: a statement inserting (or moving) events checks their
--   distinct devices in one query at its end, when the foreign key checked them, and fails with
--   the foreign key's SQLSTATE (23503, foreign_key_violation), which src/ingest/devices.ts answers
--   as the device's 404;
-- - the devices found are locked KEY SHARE, as the foreign key locked them, so a device deleted
--   meanwhile either fails the statement (deleted first) or waits for its commit and then takes
--   the new events with it (deleted after);
-- - deleting a device deletes its events (ON DELETE CASCADE was the foreign key's), once per
--   deleting statement: an organisation's devices go in one pass.
-- bench:store (PGlite, 1,000-event batches over 1,000 devices) prices it: the variant
-- "device checked per row (before 0016)" against "as migrated".
ALTER TABLE events DROP CONSTRAINT events_device_id_fkey;

CREATE FUNCTION events_device_exists() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  missing text;
BEGIN
  -- One query: each distinct device locked, the first one missing named (a small batch's check
  -- costs about what the foreign key's did, a large one's much less).
  SELECT n.device_id INTO missing
    FROM (SELECT DISTINCT device_id FROM new_events) AS n
    LEFT JOIN LATERAL (SELECT d.id FROM devices d WHERE d.id = n.device_id FOR KEY SHARE) AS d ON true
    WHERE d.id IS NULL
    LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'insert or update on table "events" violates the check "events_device_exists"'
      USING ERRCODE = 'foreign_key_violation',
        DETAIL = format('Key (device_id)=(%s) is not present in table "devices".', missing);
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER events_device_inserted AFTER INSERT ON events
  REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION events_device_exists();
CREATE TRIGGER events_device_updated AFTER UPDATE ON events
  REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION events_device_exists();

CREATE FUNCTION devices_events_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM events WHERE device_id IN (SELECT id FROM old_devices);
  RETURN NULL;
END
$$;
CREATE TRIGGER devices_events_deleted AFTER DELETE ON devices
  REFERENCING OLD TABLE AS old_devices FOR EACH STATEMENT EXECUTE FUNCTION devices_events_deleted();

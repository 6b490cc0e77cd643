-- PGlite runs Postgres as one session (single-user mode): its transactions run one at a time, so no
-- other can delete a device between 0016's check of an event's device and the inserting statement's
-- commit. The check's row lock (FOR KEY SHARE, one WAL record and a tuple header written per device
-- of each batch) guards against nothing there and is left out; on Postgres the function stays 0016's.
-- bench:store prices it: the variant "device check with its row lock (before 0019)", 0.4-0.7 µs of
-- 25-27 per stored event in the writer's 4,000-event batches (a batch's ~1,000 devices locked).
DO $migration$
BEGIN
  IF version() LIKE '%PGlite%' THEN
    CREATE OR REPLACE FUNCTION events_device_exists() RETURNS trigger LANGUAGE plpgsql AS $function$
    DECLARE
      missing text;
    BEGIN
      SELECT n.device_id INTO missing
        FROM (SELECT DISTINCT device_id FROM new_events) AS n
        WHERE NOT EXISTS (SELECT 1 FROM devices d WHERE d.id = n.device_id)
        LIMIT 1;
      IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "events" violates the check "events_device_exists"'
          USING ERRCODE = 'foreign_key_violation',
            DETAIL = format('Key (device_id)=(%s) is not present in table "devices".', missing);
      END IF;
      RETURN NULL;
    END
    $function$;
  END IF;
END
$migration$;

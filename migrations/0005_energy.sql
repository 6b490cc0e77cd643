-- Energy readings and their rollups (src/energy/).
--
-- A series is one stream of quantities: a device's readings of one kind, source and flow
-- while it sat in one space (level 'device'), or their sum over a space ('space', device_id '')
-- or over the organisation ('organisation', space_id '' and device_id ''). space_id '' on a
-- device series: the device had no space. Readings keep the space they were measured in.
CREATE TABLE energy_series (
  id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  kind            text NOT NULL CHECK (kind IN ('electricity', 'gas', 'water')),
  level           text NOT NULL CHECK (level IN ('device', 'space', 'organisation')),
  space_id        text NOT NULL,
  device_id       text NOT NULL,
  source          text NOT NULL CHECK (source IN ('grid', 'solar', 'wind', 'generator', 'other')),
  flow            text NOT NULL CHECK (flow IN ('consumption', 'production', 'import', 'export')),
  UNIQUE (organisation_id, kind, level, space_id, device_id, source, flow)
);
CREATE INDEX energy_series_device ON energy_series (device_id, kind) WHERE level = 'device';

-- Raw readings: the quantity consumed (or produced…) since the previous reading, counted at
-- its timestamp. No foreign key: a per-row check would cost more than the insert itself at
-- bulk-import rates; the trigger below removes a series' rows with it.
CREATE TABLE energy_readings (
  timestamp bigint  NOT NULL,
  series_id integer NOT NULL,
  quantity  numeric NOT NULL,
  event_id  text
);
CREATE INDEX energy_readings_series_time ON energy_readings (series_id, timestamp);

-- Rollups: sums per series and UTC hour / UTC day (bucket = its start, epoch ms), kept in
-- the transaction that writes the readings. Room on each page for in-place (HOT) updates.
CREATE TABLE energy_hourly (
  series_id integer NOT NULL,
  bucket    bigint  NOT NULL,
  quantity  numeric NOT NULL,
  PRIMARY KEY (series_id, bucket)
) WITH (fillfactor = 90);

CREATE TABLE energy_daily (
  series_id integer NOT NULL,
  bucket    bigint  NOT NULL,
  quantity  numeric NOT NULL,
  PRIMARY KEY (series_id, bucket)
) WITH (fillfactor = 70);

CREATE FUNCTION energy_series_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM energy_readings WHERE series_id = OLD.id;
  DELETE FROM energy_hourly WHERE series_id = OLD.id;
  DELETE FROM energy_daily WHERE series_id = OLD.id;
  RETURN OLD;
END
$$;
CREATE TRIGGER energy_series_deleted AFTER DELETE ON energy_series
  FOR EACH ROW EXECUTE FUNCTION energy_series_deleted();

-- Register baselines of `{"meter"}` readings, per device, kind, source and flow: locked and
-- advanced in the writing transaction, so concurrent writers and restarts never lose one.
CREATE TABLE energy_meters (
  device_id  text    NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  kind       text    NOT NULL,
  source     text    NOT NULL,
  flow       text    NOT NULL,
  register   numeric,
  timestamp  bigint,
  PRIMARY KEY (device_id, kind, source, flow)
);

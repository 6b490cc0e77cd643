-- Device traffic: events (with optional files), locations, commands and their runs.

CREATE TABLE events (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL,
  device_id       text NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  name            text NOT NULL,
  data            jsonb,
  timestamp       bigint NOT NULL,
  received_at     bigint NOT NULL,
  protocol        text NOT NULL,
  has_file        boolean NOT NULL DEFAULT false
);
CREATE INDEX events_device_time ON events (device_id, timestamp, id);
CREATE INDEX events_device_name_time ON events (device_id, name, timestamp, id);

CREATE TABLE event_files (
  event_id     text PRIMARY KEY REFERENCES events(id) ON DELETE CASCADE,
  filename     text,
  content_type text NOT NULL,
  size         integer NOT NULL,
  bytes        bytea NOT NULL
);

CREATE TABLE locations (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL,
  device_id       text NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  latitude        numeric NOT NULL,
  longitude       numeric NOT NULL,
  altitude        numeric,
  timestamp       bigint NOT NULL,
  received_at     bigint NOT NULL,
  protocol        text NOT NULL
);
CREATE INDEX locations_device_time ON locations (device_id, timestamp, id);

CREATE TABLE commands (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  device_id       text NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  name            text NOT NULL,
  slug            text NOT NULL,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL,
  UNIQUE (device_id, slug)
);
CREATE INDEX commands_org_created ON commands (organisation_id, created_at);

CREATE TABLE command_runs (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL,
  command_id      text NOT NULL REFERENCES commands(id) ON DELETE CASCADE,
  device_id       text NOT NULL,
  data            jsonb,
  timestamp       bigint NOT NULL,
  protocol        text NOT NULL
);
CREATE INDEX command_runs_command_time ON command_runs (command_id, timestamp);

-- Persistent MQTT sessions (clean session 0), shared by every process (src/store/mqttSessions.ts):
-- a client id, the principal it belongs to, its subscriptions, and the QoS 1 deliveries kept
-- for it. A clean session is never stored.
CREATE TABLE mqtt_sessions (
  client_id  text PRIMARY KEY,
  -- `principalKey` (src/adapters/mqtt/sessions.ts): only this principal may resume the session.
  principal  text NOT NULL,
  created_at bigint NOT NULL
);

-- `pattern` is the filter as a LIKE pattern (wildcard levels become %), so a delivery finds
-- the sessions it is for in the statement that queues it. Every filter names one device.
CREATE TABLE mqtt_subscriptions (
  client_id text NOT NULL REFERENCES mqtt_sessions (client_id) ON DELETE CASCADE,
  topic     text NOT NULL,
  device_id text NOT NULL,
  pattern   text NOT NULL,
  qos       smallint NOT NULL,
  PRIMARY KEY (client_id, topic)
);
CREATE INDEX mqtt_subscriptions_device_id ON mqtt_subscriptions (device_id);

-- A client id's deliveries, sent or not, until acknowledged. Every process that receives a
-- delivery queues it, keyed by its content (`message_key`), so the copies collapse into one
-- row; an acknowledged row stays a while (`acked_at`) so a late copy cannot queue it again.
CREATE TABLE mqtt_outgoing (
  client_id   text NOT NULL REFERENCES mqtt_sessions (client_id) ON DELETE CASCADE,
  message_key text NOT NULL,
  seq         bigint GENERATED ALWAYS AS IDENTITY,
  topic       text NOT NULL,
  payload     text NOT NULL,
  qos         smallint NOT NULL,
  -- The packet identifier it was last sent with, resent with it [MQTT-4.4.0-1].
  message_id  integer,
  acked_at    bigint,
  PRIMARY KEY (client_id, message_key)
);
CREATE INDEX mqtt_outgoing_queued ON mqtt_outgoing (client_id, seq) WHERE acked_at IS NULL;
CREATE INDEX mqtt_outgoing_message_id ON mqtt_outgoing (client_id, message_id) WHERE acked_at IS NULL;
CREATE INDEX mqtt_outgoing_acked_at ON mqtt_outgoing (acked_at) WHERE acked_at IS NOT NULL;

-- Alerts: rules, notification templates, alerts and the device actors' snapshots.

CREATE TABLE notification_templates (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  title           text NOT NULL DEFAULT '',
  type            text NOT NULL,
  body            text NOT NULL DEFAULT '',
  webhook_url     text,
  webhook_headers jsonb,
  config          jsonb,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);

CREATE TABLE alert_rules (
  id                       text PRIMARY KEY,
  organisation_id          text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  name                     text NOT NULL,
  type                     text NOT NULL,
  severity                 text NOT NULL,
  enabled                  boolean NOT NULL DEFAULT true,
  auto_resolve             boolean NOT NULL DEFAULT false,
  config                   jsonb NOT NULL,
  product_id               text REFERENCES products(id) ON DELETE CASCADE,
  space_id                 text REFERENCES spaces(id) ON DELETE CASCADE,
  notification_template_id text REFERENCES notification_templates(id) ON DELETE SET NULL,
  created_at               bigint NOT NULL,
  updated_at               bigint NOT NULL
);
CREATE INDEX alert_rules_org ON alert_rules (organisation_id, created_at);

CREATE TABLE alerts (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  alert_rule_id   text NOT NULL REFERENCES alert_rules(id) ON DELETE CASCADE,
  device_id       text REFERENCES devices(id) ON DELETE CASCADE,
  gateway_id      text,
  event_id        text,
  event_name      text,
  event_data      jsonb,
  event_timestamp bigint,
  note            text NOT NULL DEFAULT '',
  state           text NOT NULL,
  first_seen_at   bigint NOT NULL,
  last_seen_at    bigint NOT NULL,
  acknowledged_at bigint,
  resolved_at     bigint,
  notifications   jsonb NOT NULL DEFAULT '[]',
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX alerts_org_created ON alerts (organisation_id, created_at);
-- One open alert per (rule, device): a repeat updates it (API-DECISIONS "Alerts").
CREATE UNIQUE INDEX alerts_one_open ON alerts (alert_rule_id, device_id) WHERE resolved_at IS NULL;

CREATE TABLE device_actors (
  device_id  text PRIMARY KEY REFERENCES devices(id) ON DELETE CASCADE,
  snapshot   jsonb NOT NULL,
  updated_at bigint NOT NULL
);

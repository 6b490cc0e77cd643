-- Voltaic schema, version 1: tenancy, credentials and the resource registry.
-- Every timestamp is epoch milliseconds (bigint, UTC) because the wire format is.

CREATE TABLE organisations (
  id          text PRIMARY KEY,
  name        text NOT NULL,
  is_platform boolean NOT NULL DEFAULT false,
  created_at  bigint NOT NULL,
  updated_at  bigint NOT NULL
);

CREATE TABLE users (
  id                  text PRIMARY KEY,
  email_address       text NOT NULL UNIQUE,
  full_name           text NOT NULL DEFAULT '',
  password_hash       text,
  login_via_sso_only  boolean NOT NULL DEFAULT false,
  is_platform_admin   boolean NOT NULL DEFAULT false,
  created_at          bigint NOT NULL,
  updated_at          bigint NOT NULL
);

CREATE TABLE organisation_users (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  user_id         text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  is_admin        boolean NOT NULL DEFAULT false,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL,
  UNIQUE (organisation_id, user_id)
);

CREATE TABLE api_keys (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  name            text NOT NULL DEFAULT '',
  secret_hash     text NOT NULL UNIQUE,
  secret_hint     text NOT NULL,
  read_only       boolean NOT NULL DEFAULT false,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);

CREATE TABLE user_tokens (
  id                   text PRIMARY KEY,
  token_hash           text NOT NULL UNIQUE,
  refresh_hash         text NOT NULL UNIQUE,
  user_id              text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  organisation_user_id text NOT NULL REFERENCES organisation_users(id) ON DELETE CASCADE,
  organisation_id      text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  scope                text NOT NULL,
  expires_at           bigint NOT NULL,
  revoked_at           bigint,
  created_at           bigint NOT NULL
);

CREATE TABLE spaces (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  client_id       text,
  name            text NOT NULL,
  is_public       boolean NOT NULL DEFAULT false,
  disabled        boolean NOT NULL DEFAULT false,
  avatar          jsonb,
  timezone        text NOT NULL DEFAULT 'UTC',
  country         text,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX spaces_org_created ON spaces (organisation_id, created_at);

CREATE TABLE products (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  name            text NOT NULL,
  description     text,
  manufacturer    text,
  model           text,
  category        text,
  image           text,
  colour          text,
  state           jsonb,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX products_org_created ON products (organisation_id, created_at);

CREATE TABLE places (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  space_id        text REFERENCES spaces(id) ON DELETE SET NULL,
  name            text NOT NULL,
  state           jsonb,
  config          jsonb,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX places_org_created ON places (organisation_id, created_at);

CREATE TABLE gateways (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  product_id      text REFERENCES products(id) ON DELETE SET NULL,
  serial_number   text,
  name            text NOT NULL,
  is_online       boolean NOT NULL DEFAULT false,
  lora            jsonb,
  last_seen_at    bigint,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX gateways_org_created ON gateways (organisation_id, created_at);

CREATE TABLE devices (
  id                                text PRIMARY KEY,
  organisation_id                   text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  space_id                          text REFERENCES spaces(id) ON DELETE SET NULL,
  product_id                        text REFERENCES products(id) ON DELETE SET NULL,
  place_id                          text REFERENCES places(id) ON DELETE SET NULL,
  gateway_id                        text REFERENCES gateways(id) ON DELETE SET NULL,
  secret_hash                       text NOT NULL UNIQUE,
  is_main                           boolean NOT NULL DEFAULT false,
  is_active                         boolean NOT NULL DEFAULT true,
  name                              text NOT NULL,
  custom_id                         text,
  serial_number                     text,
  batch_number                      text,
  state                             jsonb,
  meta                              jsonb,
  wifi                              jsonb,
  cellular                          jsonb,
  bluetooth                         jsonb,
  lora                              jsonb,
  sigfox                            jsonb,
  last_seen_at                      bigint,
  last_unprocessed_event_timestamp  bigint,
  last_processed_event_timestamp    bigint,
  created_at                        bigint NOT NULL,
  updated_at                        bigint NOT NULL
);
CREATE UNIQUE INDEX devices_org_custom_id ON devices (organisation_id, custom_id) WHERE custom_id IS NOT NULL;
CREATE INDEX devices_org_created ON devices (organisation_id, created_at);
CREATE INDEX devices_space ON devices (space_id);
CREATE INDEX devices_product ON devices (product_id);
CREATE INDEX devices_place ON devices (place_id);
CREATE INDEX devices_gateway ON devices (gateway_id);

-- User management: teams and their members, space alert recipients, management clients.

CREATE TABLE teams (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  name            text NOT NULL,
  is_admin        boolean NOT NULL DEFAULT false,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX teams_org_created ON teams (organisation_id, created_at);

CREATE TABLE team_members (
  team_id              text NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
  organisation_user_id text NOT NULL REFERENCES organisation_users(id) ON DELETE CASCADE,
  created_at           bigint NOT NULL,
  PRIMARY KEY (team_id, organisation_user_id)
);
CREATE INDEX team_members_user ON team_members (organisation_user_id);

CREATE TABLE space_alert_users (
  space_id             text NOT NULL REFERENCES spaces(id) ON DELETE CASCADE,
  organisation_user_id text NOT NULL REFERENCES organisation_users(id) ON DELETE CASCADE,
  created_at           bigint NOT NULL,
  PRIMARY KEY (space_id, organisation_user_id)
);
CREATE INDEX space_alert_users_user ON space_alert_users (organisation_user_id);

CREATE TABLE management_clients (
  id              text PRIMARY KEY,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  name            text NOT NULL,
  client_id       text NOT NULL UNIQUE,
  secret_hash     text NOT NULL,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
CREATE INDEX management_clients_org ON management_clients (organisation_id, created_at);

CREATE TABLE management_tokens (
  id              text PRIMARY KEY,
  token_hash      text NOT NULL UNIQUE,
  client_id       text NOT NULL REFERENCES management_clients(id) ON DELETE CASCADE,
  organisation_id text NOT NULL REFERENCES organisations(id) ON DELETE CASCADE,
  expires_at      bigint NOT NULL,
  created_at      bigint NOT NULL
);

CREATE INDEX organisation_users_org ON organisation_users (organisation_id, created_at);

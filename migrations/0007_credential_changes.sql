-- A counter bumped by every change that ends a credential or changes what it may do. Every
-- process polls it (src/auth/CredentialWatch.ts) and re-checks its open MQTT sessions when it
-- moved, so a revocation reaches them even when its bus notice was lost, and whatever path made
-- it (a route, a cascade, a tool writing the database directly).
--
-- One row, updated in place, rather than a sequence: nextval is visible before its transaction
-- commits, so a process could re-check, still find the old credential, and never look again.
-- The triggers are deferred to commit, so the row's lock is the last one a transaction takes:
-- taken at statement time, a token refresh (token row, then this row) and a user removal (this
-- row, then the cascade to that token) could deadlock.
CREATE TABLE credential_changes (
  id      boolean PRIMARY KEY DEFAULT true CHECK (id),
  version bigint NOT NULL
);
INSERT INTO credential_changes (id, version) VALUES (true, 0);

CREATE FUNCTION credential_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE credential_changes SET version = version + 1;
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER api_keys_deleted AFTER DELETE ON api_keys
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER api_keys_changed AFTER UPDATE ON api_keys
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.secret_hash, OLD.read_only, OLD.organisation_id) IS DISTINCT FROM (NEW.secret_hash, NEW.read_only, NEW.organisation_id))
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER devices_deleted AFTER DELETE ON devices
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER devices_key_changed AFTER UPDATE ON devices
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.secret_hash, OLD.organisation_id) IS DISTINCT FROM (NEW.secret_hash, NEW.organisation_id))
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER user_tokens_deleted AFTER DELETE ON user_tokens
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER user_tokens_changed AFTER UPDATE ON user_tokens
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.token_hash, OLD.revoked_at, OLD.expires_at, OLD.scope, OLD.organisation_user_id)
    IS DISTINCT FROM (NEW.token_hash, NEW.revoked_at, NEW.expires_at, NEW.scope, NEW.organisation_user_id))
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER organisation_users_deleted AFTER DELETE ON organisation_users
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER organisation_users_changed AFTER UPDATE ON organisation_users
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.is_admin, OLD.organisation_id, OLD.user_id) IS DISTINCT FROM (NEW.is_admin, NEW.organisation_id, NEW.user_id))
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER users_deleted AFTER DELETE ON users
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER users_changed AFTER UPDATE ON users
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.is_platform_admin, OLD.email_address) IS DISTINCT FROM (NEW.is_platform_admin, NEW.email_address))
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER organisations_deleted AFTER DELETE ON organisations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER organisations_changed AFTER UPDATE ON organisations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (OLD.is_platform IS DISTINCT FROM NEW.is_platform)
  EXECUTE FUNCTION credential_changed();

CREATE CONSTRAINT TRIGGER management_clients_deleted AFTER DELETE ON management_clients
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER management_tokens_deleted AFTER DELETE ON management_tokens
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credential_changed();
CREATE CONSTRAINT TRIGGER management_tokens_changed AFTER UPDATE ON management_tokens
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN ((OLD.token_hash, OLD.expires_at, OLD.client_id) IS DISTINCT FROM (NEW.token_hash, NEW.expires_at, NEW.client_id))
  EXECUTE FUNCTION credential_changed();

-- Failed sign-ins, shared by every process (src/auth/SignInGuard.ts). The row with address ''
-- counts an account's failures from every address; the others count one account from one
-- address. A window starts at first_failed_at (epoch ms, database clock) and restarts with
-- the first failure after it ends; rows whose window ended are deleted.
CREATE TABLE sign_in_failures (
  account text NOT NULL,
  address text NOT NULL,
  failures integer NOT NULL,
  first_failed_at bigint NOT NULL,
  PRIMARY KEY (account, address)
);
CREATE INDEX sign_in_failures_first_failed_at ON sign_in_failures (first_failed_at);

-- Devices' pages keep 30 % free, so that a device's `lastSeenAt` (moved by every batch of its events,
-- src/store/batch.ts) is updated in place: a heap-only (HOT) update writes no entry into the table's eight
-- indexes. Full pages (the default, 100) made ~70 % of these updates move the row to another page and add an
-- entry to every index. bench:store, PGlite, 1,000-event batches over 1,000 devices (2026-11-27): 39.0 →
-- 32.3 µs per stored event. Pages already full take the setting as their rows next move; Postgres's
-- autovacuum (and, for PGlite, src/store/maintenance.ts) makes their old room reusable.
ALTER TABLE devices SET (fillfactor = 70);

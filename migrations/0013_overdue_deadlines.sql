-- The offline deadlines in device_actors.wake_at are swept (src/entities/overdue.ts): every second, each process
-- reads the buckets whose rows hold a deadline due within 2 s, by this index, to wake those it owns and does not
-- host yet (a restart, a handover) and those left overdue.
CREATE INDEX device_actors_wake_at ON device_actors (wake_at, bucket) WHERE wake_at IS NOT NULL;

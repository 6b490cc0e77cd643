-- The offline deadlines in device_actors.wake_at are swept for those left overdue (their bucket's
-- owner died, or no process hosts the bucket yet): src/entities/overdue.ts reads the buckets of
-- rows whose deadline passed, every second, by this index. Normally it finds none.
CREATE INDEX device_actors_wake_at ON device_actors (wake_at, bucket) WHERE wake_at IS NOT NULL;

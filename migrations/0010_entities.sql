-- Device bucket entities (src/entities) keep each device's machine snapshot in device_actors,
-- with what the space entities count and the offline deadline the device has scheduled.
ALTER TABLE device_actors ADD COLUMN liveness text NOT NULL DEFAULT 'other';
ALTER TABLE device_actors ADD COLUMN liveness_at bigint NOT NULL DEFAULT 0;
ALTER TABLE device_actors ADD COLUMN wake_at bigint;
UPDATE device_actors SET liveness = CASE snapshot->>'value' WHEN 'online' THEN 'online' WHEN 'offline' THEN 'offline' ELSE 'other' END,
  liveness_at = updated_at;

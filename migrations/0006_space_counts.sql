-- Live counts of a space: open alerts are found through their device.
CREATE INDEX alerts_device_open ON alerts (device_id) WHERE resolved_at IS NULL;

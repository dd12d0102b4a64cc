"""The prediction log: calibrated inputs kept with their prediction ids until their labels arrive; its
writer (thread or process, through a shared-memory ring), its id index in epochs with Bloom filters,
its lookups and its per-name caps."""

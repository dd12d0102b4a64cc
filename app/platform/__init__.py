"""What every part of the service stands on: the database, domain errors, logs, the shared rows, migrations
and the server process (allocator, HTTP protocol, name and version)."""

"""Alembic environment of the service's database schema (shipped as app.migrations)."""

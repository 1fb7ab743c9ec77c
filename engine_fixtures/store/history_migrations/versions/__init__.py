"""Revision files (alembic skips this module)."""

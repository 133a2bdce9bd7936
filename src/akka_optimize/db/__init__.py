"""State: SQLAlchemy 2 models and Alembic migrations.

SQLite (WAL mode) by default, PostgreSQL through the same URL. Tables are
declared per concern in :mod:`akka_optimize.db.models`; the schema is created
only by Alembic migrations (:func:`akka_optimize.db.migrate.upgrade`), which the
service applies at start.
"""

from .base import Base, Database, utcnow

__all__ = ["Base", "Database", "utcnow"]

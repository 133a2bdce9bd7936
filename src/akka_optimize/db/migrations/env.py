"""Alembic environment: runs migrations against the URL set by migrate.alembic_config."""

from alembic import context

from akka_optimize.db import models  # noqa: F401  (registers every table)
from akka_optimize.db.base import Base, make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = make_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()

"""Alembic environment: migrations run against the connection handed over by `catalog.store.migrate`."""

from alembic import context

from medallion_assets.catalog.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

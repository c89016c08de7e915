"""The lake: bronze, silver and gold as Iceberg tables in a configured catalog.

- `root`: the lake (`Lake`), resolved once from its configured root: its catalogs, table and quarantine paths;
- `catalogs`: which catalog holds the tables (embedded JDBC, Glue, REST), for Spark and for pyiceberg;
- `layout`: table names, partitioning, order and properties, and their checks (no Spark, no pyiceberg);
- `tables`: reads and commits through Spark: appends, write-audit-publish branches, rollback, time travel;
- `metadata`: snapshots, schema and history through pyiceberg, without a JVM;
- `history`: a table's ancestry and rollback of its `main`, through pyiceberg;
- `maintenance`: compaction, snapshot expiry and orphan-file removal through Iceberg's procedures;
- `migration`: a parquet lake of the old layout made Iceberg tables in place (`add_files`).

Nothing outside this package spells an Iceberg property or procedure.
"""

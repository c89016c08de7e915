"""What a catalog change does before it is made: the rows it adds, changes and removes, a category per dataset
(breaking, non_breaking, checks_only, metadata_only, no_op, as SQLMesh categorises model changes), what it
rebuilds and why, and whether it breaks a warehouse target's contract. No Spark: rows, sqlglot, the dataset
graph and Iceberg metadata read through pyiceberg.

`medallion plan` shows a plan of files; the control sensor plans what plain SQL changed in the catalog.
"""

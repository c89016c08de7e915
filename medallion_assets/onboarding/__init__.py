"""SQL onboarding: SQL files → catalog rows (sources, targets, stages with their SQL, lineage, rules).

parse.py splits and classifies statements, lineage.py derives table and column lineage (collapsing temporary
tables), catalog_rows.py turns that into rows with layer decisions, and onboard.py validates and writes them;
`medallion onboard` is cli/onboard.py.
"""

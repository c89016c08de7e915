"""SQL onboarding: SQL files → catalog rows (sources, targets, stages with their SQL, lineage, rules).

parse.py splits and classifies statements, lineage.py derives table and column lineage (collapsing temporary
tables), catalog_rows.py turns that into rows (its parts: datasets.py matches tables to the catalog, layers.py
decides each dataset's layer, catalog_ids.py its id, stage_plans.py which statements a stage replays), and
onboard.py validates and writes them; `medallion onboard` is cli/onboard.py.
"""

"""Recovery: the catalog's dataset graph, every path by which a dataset can be produced, and availability.

- `graph`: the networkx graph of datasets built from a catalog snapshot; upstream, downstream and column
  queries; the checks the catalog loader runs on lineage rows.
- `paths`: every path by which a dataset can be produced, ranked by cost and bounded; the shortest path that
  avoids what is down; their materialization in `dataset_recovery_paths`.
- `availability`: probes of sources and warehouse tables, cached, plus the operators' `available` flags.
- `routes`: what the engine reads when its source or an input is down, each re-route audited.
"""

"""Runtime policy, read fresh from the catalog at run and tick time, in three rooms: `steering` (what runs,
when and how fast), `healing` (what a failure does next) and `monitoring` (how the pipelines are doing, and
who is told). `rows` and `registry` are what the rooms share."""

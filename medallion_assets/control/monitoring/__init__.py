"""Monitoring: freshness against SLAs (`sla`), volume anomalies (`anomalies`), Prometheus `metrics`, the
`alerts` worth telling and the `notifications` that deliver them, and one screen per pipeline (`status`, which
reads steering's switches and profile). It never imports healing."""

"""Steering: kill switches (`flags`), rate limits and pools (`throttles`), the scheduling profiles and the
launcher's policy (`scheduling`) with its offline `simulator`, and what operators do to a table by hand or on
a schedule (`rollback`, `maintenance`). It imports neither healing nor monitoring."""

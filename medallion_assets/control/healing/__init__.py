"""Healing: the way of one failure (`failures`: retries, back-off, re-execution), the rules matched against it
(`rules`), what actions speak (`remedies`) and the built-in actions (`actions`). It may use steering (an
action sets a flag or rolls a table back), never monitoring."""

"""Watching what serves: `deploytool top` and `deploytool monitor` (docs/monitor.md)."""

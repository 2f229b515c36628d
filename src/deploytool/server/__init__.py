"""The one client of an OpenAI-compatible server and what deploytool reads from one
(docs/architecture.md)."""

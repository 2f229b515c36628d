"""A release on this host besides its image: its state, weights, secrets, what `up` reads from the
host, its compose document and its slot's kernel cache (docs/architecture.md)."""

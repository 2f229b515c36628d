"""A release on this host besides its image: slot, state, weights, secrets, compose document,
kernel cache, and the running release as something to measure (docs/architecture.md)."""

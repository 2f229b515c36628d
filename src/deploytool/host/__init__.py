"""The machine: the Docker engine, its labels, the GPUs (docs/architecture.md)."""

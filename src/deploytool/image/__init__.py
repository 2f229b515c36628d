"""What goes into an image, and its checks before anything starts (docs/architecture.md)."""

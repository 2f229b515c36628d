"""deploytool: from a patched SGLang runtime to production traffic, proven first."""

__version__ = "0.1.0"

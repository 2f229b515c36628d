"""`python -m deploytool` is the `deploytool` command."""

from .cli import main

main()

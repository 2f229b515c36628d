"""What the two checks, qualify and bench, share below them: what they measure (`targets.py`: an
endpoint given by URL, or the release serving a slot, and the baseline release it is compared with)
and where their reports are kept (`reports.py`) (docs/architecture.md)."""

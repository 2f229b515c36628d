"""Code that runs inside images, not in deploytool's own process.

Each module here is standard-library only (an image has Python but not deploytool's
dependencies): it is copied into a build context (unidiff.py, the patch applier) or sent to a
container's `python3 -c` (flagprobe.py, the sglang flag check). deploytool imports them too,
so the patch check on the host and the build in the image run the same code.
"""

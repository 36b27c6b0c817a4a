"""surge's version: one line, read by the build (pyproject.toml) and by the layers
that print it (the User-Agent, HAR, --version) without importing the package root."""

__version__ = "0.1.0"

"""The package version, in the one module every layer can import without a cycle."""

__version__ = "0.1.0"

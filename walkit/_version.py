"""The package version, importable without importing the whole of walkit."""

__version__ = "0.1.0"

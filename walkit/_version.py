"""The package version, importable without importing the whole of walkit."""

__version__ = "0.2.0.dev0"

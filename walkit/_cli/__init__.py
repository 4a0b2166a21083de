"""Implementation of the `walkit` command (see walkit.cli)."""

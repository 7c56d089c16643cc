"""Measuring and documentation tools (not science; the workflow never imports this package)."""

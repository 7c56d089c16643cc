"""The error every configuration check raises: :class:`ConfigError`, its message naming the
offending key. Its own module so that any module of the plan stage (atat.plan.config, which
re-exports it, and the modules that config imports, such as atat.plan.eps_scale) can raise it
without importing each other."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is invalid; the message names the offending key."""

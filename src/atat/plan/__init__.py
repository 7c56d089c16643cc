"""The plan: the config, its validation and every name resolved up front."""

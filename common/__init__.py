"""The leaf kernel (errors, serdes, config, handlers): imports nothing of the project."""

"""``raygate serve``'s settings: flags, environment, config file, reload."""

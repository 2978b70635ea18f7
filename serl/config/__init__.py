"""Configuration: the options, config files, the recipe registry, and the original projects' flags."""

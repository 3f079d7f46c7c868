"""Configuration: the one settings object, secrets, where keys may go, and scrubbing them from text."""

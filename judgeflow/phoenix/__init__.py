"""Arize Phoenix: its spans as a trace source, and scores written back as annotations."""

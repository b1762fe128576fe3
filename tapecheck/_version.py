"""The version, in a module of its own: what reads it (reports, the cache key, the CLI) imports
nothing else of tapecheck."""

__version__ = "0.1.0"

"""Retriever: load a propdex index and search it."""
from .context import Citation, Context
from .searcher import LEVELS, Hit, Searcher
from .settings import SearchSettings

__all__ = ["LEVELS", "Citation", "Context", "Hit", "SearchSettings", "Searcher"]

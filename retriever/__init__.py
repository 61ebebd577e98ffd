"""Retriever: load a propdex index and search it."""
from .searcher import LEVELS, Hit, Searcher
from .settings import SearchSettings

__all__ = ["LEVELS", "Hit", "SearchSettings", "Searcher"]

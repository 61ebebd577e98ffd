"""Retriever: load a propdex index and search it."""
from .searcher import LEVELS, Hit, Searcher

__all__ = ["LEVELS", "Hit", "Searcher"]

"""Retriever: load a propdex index and search it."""
from .context import Citation, Context
from .searcher import LEVELS, Hit, Searcher
from .settings import SearchSettings
from .timing import STAGES, stage_times

__all__ = ["LEVELS", "STAGES", "Citation", "Context", "Hit", "SearchSettings", "Searcher", "stage_times"]

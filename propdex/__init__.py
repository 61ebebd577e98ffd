"""propdex: multi-vector retrieval at a finer grain than one vector per document."""

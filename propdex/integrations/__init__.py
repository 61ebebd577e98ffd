"""Adapters for RAG frameworks: `langchain` (extra `[langchain]`) and
`llamaindex` (extra `[llamaindex]`). Each exposes `PropdexRetriever(index=..., k=5)`."""

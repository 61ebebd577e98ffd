"""Indexer: read corpora, encode them, write sharded FAISS + LMDB indexes."""

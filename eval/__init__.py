"""Measurement: datasets, metrics, runs of systems against baselines, reports."""

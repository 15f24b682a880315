"""Benchmarks run by `manage.py bench`: each prints figures; none is a test."""

"""Benchmarks of gputape against hand-written numpy and peers (see README.md)."""

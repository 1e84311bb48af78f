"""Benchmarks that run hkjit and its peers side by side in one process and print ratios."""

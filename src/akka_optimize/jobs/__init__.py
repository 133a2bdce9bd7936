"""Runs: records and states, attempts, the scheduler, executors and the worker."""

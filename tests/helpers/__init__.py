"""Helpers shared by the tests (imported by test modules; no test module imports another)."""

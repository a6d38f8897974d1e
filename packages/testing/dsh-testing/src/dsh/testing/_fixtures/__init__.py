"""The code behind :mod:`dsh.testing.fixtures` (private: import from there)."""

"""The provider conformance suite's code; the public module is :mod:`dsh.testing.conformance`."""

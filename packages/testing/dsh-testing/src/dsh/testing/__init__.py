"""dsh.testing — what dsh's own tests and third-party provider packages test with.

Fake model servers on 127.0.0.1, scripted models and providers, a mock ACP agent
and the provider conformance suite. Nothing here mocks dsh itself.
"""

"""dsh.testing — what dsh's own tests and third-party provider packages test with.

Fake model servers on 127.0.0.1, scripted models and providers, a mock ACP agent,
the provider conformance suite (:mod:`dsh.testing.conformance`), the process table
as tests see it (:mod:`dsh.testing.processes`), the code samples of Markdown docs
(:mod:`dsh.testing.docs`), and an opt-in pytest plugin
(``-p dsh.testing.pytest_plugin``: no leftover process, no skip under ``CI=true``).
Nothing here mocks dsh itself.
"""

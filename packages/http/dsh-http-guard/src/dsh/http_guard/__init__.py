"""dsh.http_guard — what stands in front of a dsh HTTP server (``dsh a2a``, ``dsh mcp
--http``): the same rules for both.

* :class:`HostGuard` with a :class:`HostPolicy` (:func:`host_policy`): the Host/Origin
  allow-list (``403``; DNS rebinding on loopback);
* :class:`BodyLimit`: the request body cap (``413``) and the idle limit on a body that
  stops arriving (``408``);
* :class:`BearerAuth`: bearer tokens (``401``), read by :func:`read_tokens`, which
  refuses a non-loopback bind without one (:class:`BindError`);
  :func:`is_loopback`;
* :func:`listen` (the socket) and :class:`QuietServer` (uvicorn without its own
  signal handling).
"""

from dsh.http_guard._bearer import BearerAuth
from dsh.http_guard._binding import BindError, host_policy, is_loopback, read_tokens
from dsh.http_guard._guard import BodyLimit, HostGuard, HostPolicy
from dsh.http_guard._listen import QuietServer, listen

__all__ = [
    "BearerAuth",
    "BindError",
    "BodyLimit",
    "HostGuard",
    "HostPolicy",
    "QuietServer",
    "host_policy",
    "is_loopback",
    "listen",
    "read_tokens",
]

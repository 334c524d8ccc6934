"""Request bodies read within a limit, for both servers of the package (the rating pages and the
web chat).

Starlette's ``Request.body()`` reads the whole body into memory before the handler can look at
its size, so a client that streams a large chunked body (no ``Content-Length``) makes the server
hold all of it. :func:`read_body` refuses a declared ``Content-Length`` over the limit before
reading anything and stops reading a streamed body as soon as it passes the limit; uvicorn
applies back-pressure to the socket meanwhile, so the server holds at most about ``limit`` bytes
plus one chunk per request.
"""

from typing import Optional


class BodyTooLarge(Exception):
    """The request's body is over the limit; ``declared`` is its Content-Length when it gave one."""

    def __init__(self, limit: int, declared: Optional[int] = None):
        self.limit, self.declared = limit, declared
        size = f'{declared} bytes' if declared is not None else 'more than that'
        super().__init__(f'request body too large ({size}; at most {limit} bytes)')


class MalformedBody(Exception):
    """A request whose framing cannot be read (a Content-Length that is not a number)."""


async def read_body(request, limit: int) -> bytes:
    """The body of ``request`` (a Starlette request), at most ``limit`` bytes.

    Raises :class:`BodyTooLarge` (answer 413) or :class:`MalformedBody` (answer 400).
    """
    declared = request.headers.get('content-length')
    if declared is not None:
        declared = declared.strip()
        if not (declared.isascii() and declared.isdigit()):
            raise MalformedBody(f'Content-Length is not a number: {declared[:40]!r}')
        if int(declared) > limit:
            raise BodyTooLarge(limit, int(declared))
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(limit)
    return bytes(body)

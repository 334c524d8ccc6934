"""The bounded body reader both servers use: a declared or streamed body over the limit is
refused, and a streamed one is not read past the limit."""

import asyncio

import pytest

from parlai_empathy.files.web_limits import BodyTooLarge, MalformedBody, read_body


class FakeRequest:
    def __init__(self, chunks, headers=None):
        self.headers = headers or {}
        self.chunks, self.read = chunks, 0

    async def stream(self):
        for chunk in self.chunks:
            self.read += 1
            yield chunk


def run(request, limit):
    return asyncio.run(read_body(request, limit))


def test_body_within_limit_is_returned_whole():
    assert run(FakeRequest([b'ab', b'cd'], {'content-length': '4'}), 4) == b'abcd'
    assert run(FakeRequest([b'ab', b'cd']), 4) == b'abcd'


def test_streamed_body_stops_at_the_limit():
    request = FakeRequest([b'x' * 1000] * 10_000)  # a 10 MB chunked body
    with pytest.raises(BodyTooLarge):
        run(request, 4096)
    assert request.read == 5  # nothing read past the chunk that crossed the limit


def test_declared_length_over_limit_is_refused_before_reading():
    request = FakeRequest([b'x'], {'content-length': str(200 * 2**20)})
    with pytest.raises(BodyTooLarge, match='209715200 bytes'):
        run(request, 4096)
    assert request.read == 0


@pytest.mark.parametrize('value', ['abc', '-1', '1e9', '\u0661\u0662', '', '12 34'])
def test_malformed_content_length_is_refused(value):
    with pytest.raises(MalformedBody):
        run(FakeRequest([b''], {'content-length': value}), 4096)

"""atrex.bot.serving.framing: when has a whole HTTP/1 request arrived (the worker's event loop
asks)."""

from atrex.bot.serving import framing

MAX = 1000


def test_a_request_is_complete_when_its_headers_and_length_are_in():
    head = b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
    assert framing(head[:20], MAX).length is None and not framing(head[:20], MAX).complete
    assert framing(head, MAX).length == len(head) + 5 and not framing(head, MAX).complete
    assert framing(head + b"12345", MAX).complete
    assert framing(head + b"12345GET / HTTP/1.1\r\n", MAX).complete  # a pipelined next one
    assert framing(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", MAX).complete
    assert framing(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n", MAX).complete  # empty lines first
    assert framing(b"GET / HTTP/1.1\nHost: x\n\n", MAX).complete  # bare LF


def test_what_is_answered_before_the_body_is_read():
    def error(head: bytes):
        return framing(b"POST / HTTP/1.1\r\n" + head + b"\r\n", MAX).error

    assert error(b"Content-Length: 1001\r\n") == (413, "Content Too Large")
    assert error(b"Transfer-Encoding: chunked\r\n") == (411, "Length Required")
    assert error(b"Content-Length: 5\r\nContent-Length: 6\r\n") == (400, "Bad Request")
    assert error(b"Content-Length: -5\r\n") == (400, "Bad Request")
    assert error(b"Content-Length: 5\r\nContent-Length: 5\r\n") is None
    assert framing(b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000, MAX).error[0] == 431
    assert framing(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
                   MAX).expect_continue

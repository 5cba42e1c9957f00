"""The embedded Redis-compatible server of the zero-configuration mode.

``bin/run`` starts it when ``REDIS_URL`` is unset, so the web process and the workers share one
lock store and run exactly the production code path (django-redis locks, Lua release scripts).
It is fakeredis's ``TcpFakeServer``; it keeps nothing on disk.
"""

import argparse
import logging

import redis
from fakeredis import TcpFakeServer
from fakeredis._clients._tcp_server import TCPFakeRequestHandler

logger = logging.getLogger(__name__)


class _Handler(TCPFakeRequestHandler):
    # With Nagle on, every pipelined reply waits for the client's delayed ACK before it is sent.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        """Answer an error reply and keep the connection, as Redis does.

        fakeredis closes the connection after any error reply, so redis-py's EVALSHA -> NOSCRIPT ->
        SCRIPT LOAD -> EVALSHA fallback (how every lock script is first run) would fail.
        """
        super().setup()
        read_response = self.current_client.read_response

        def read_response_keeping_connection(*args, **kwargs):
            try:
                return read_response(*args, **kwargs)
            except redis.exceptions.ResponseError as error:
                return error  # encoded as "-ERR ..." by the writer

        self.current_client.read_response = read_response_keeping_connection


def serve(host: str, port: int) -> None:
    server = TcpFakeServer((host, port))
    server.RequestHandlerClass = _Handler
    server.daemon_threads = True  # so Ctrl-C stops the server even with clients connected
    logger.info("embedded Redis listening on %s:%d", host, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6390)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serve(args.host, args.port)


if __name__ == "__main__":
    main()

"""The floors of `bench http`, each run as its own process: N bodies POSTed to the same
receiver with K requests in flight, no database, no broker, no signing. Prints one line of
JSON: {"requests", "seconds", "failed"}.

    python -m bench.httpfloor --client aiohttp|streams --requests N --in-flight K --port P --hosts H

--client aiohttp: one aiohttp session, keep-alive (an HTTP library's cost included).
--client streams: the event loop's bare streams, no HTTP library: each request written by
hand as HTTP/1.1 bytes, the answer's status line and Content-Length read by hand, the
connection kept alive and reused (at most K open, pooled per host). What an HTTP client on
this machine's Python can do at best: the limit Cronfleet's worker is measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp


async def post_all(requests: int, in_flight: int, port: int, hosts: int) -> dict:
    gate = asyncio.Semaphore(in_flight)
    failed = 0
    connector = aiohttp.TCPConnector(limit=in_flight, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(number: int) -> None:
            nonlocal failed
            async with gate:
                url = f"http://127.0.0.{number % hosts + 1}:{port}/floor/{number}"
                try:
                    async with session.post(url, data=json.dumps({"job": number}).encode()) as response:
                        await response.read()
                        failed += response.status != 200
                except aiohttp.ClientError:
                    failed += 1

        started = time.monotonic()
        await asyncio.gather(*(post(number) for number in range(requests)))
        return {"requests": requests, "seconds": time.monotonic() - started, "failed": failed}


async def post_all_streams(requests: int, in_flight: int, port: int, hosts: int) -> dict:
    gate = asyncio.Semaphore(in_flight)
    idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
    failed = 0

    async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await reader.readexactly(length)
        return status

    async def post(number: int) -> None:
        nonlocal failed
        async with gate:
            host = f"127.0.0.{number % hosts + 1}"
            body = json.dumps({"job": number}).encode()
            request = (
                f"POST /floor/{number} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            pool = idle.setdefault(host, [])
            connection = pool.pop() if pool else await asyncio.open_connection(host, port)
            try:
                status = await exchange(*connection, request)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                connection[1].close()
                failed += 1
                return
            pool.append(connection)
            failed += status != 200

    started = time.monotonic()
    await asyncio.gather(*(post(number) for number in range(requests)))
    seconds = time.monotonic() - started
    for pool in idle.values():
        for _, writer in pool:
            writer.close()
    return {"requests": requests, "seconds": seconds, "failed": failed}


CLIENTS = {"aiohttp": post_all, "streams": post_all_streams}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(CLIENTS), default="aiohttp")
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--in-flight", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=1)
    args = parser.parse_args()
    figures = asyncio.run(CLIENTS[args.client](args.requests, args.in_flight, args.port, args.hosts))
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()

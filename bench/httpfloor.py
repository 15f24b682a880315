"""The floor of `bench http`, run as its own process: a plain asyncio client (aiohttp, one
session, keep-alive) posting N bodies to the same receiver with K requests in flight, no
database, no broker, no signing. Prints one line of JSON: {"requests", "seconds", "failed"}.

    python -m bench.httpfloor --requests N --in-flight K --port P --hosts H
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--in-flight", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(post_all(args.requests, args.in_flight, args.port, args.hosts))), flush=True)


if __name__ == "__main__":
    main()

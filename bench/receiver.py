"""The webhook receiver of `bench http`, run as its own process:

    python -m bench.receiver --port P --hosts H --latency S [--hang-seconds T] --out FILE

It listens on 127.0.0.1 ... 127.0.0.H (the loopback network's own addresses: H hosts to a
client's per-host share and connection pool), answers each request after S seconds
(the last host, with --hang-seconds, after T instead: a receiver that hangs past the
deadline), and on SIGTERM writes one line per request to FILE: the host, the arrival time
(Unix seconds), and the webhook-id, webhook-timestamp and webhook-signature headers with
the body, for the bench to verify the signatures and time the arrivals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--hang-seconds", type=float, default=0.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args))


async def serve(args) -> None:
    seen: list[tuple] = []
    hanging = f"127.0.0.{args.hosts}" if args.hang_seconds else None

    async def answer(request: web.Request) -> web.Response:
        body = await request.read()
        host = request.transport.get_extra_info("sockname")[0]
        headers = request.headers
        seen.append(
            (
                host,
                time.time(),
                headers.get("webhook-id"),
                headers.get("webhook-timestamp"),
                headers.get("webhook-signature"),
                body.decode("utf-8", "replace"),
            )
        )
        await asyncio.sleep(args.hang_seconds if host == hanging else args.latency)
        return web.Response(body=b'{"ok": true}', content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    for number in range(1, args.hosts + 1):
        await web.TCPSite(runner, f"127.0.0.{number}", args.port, backlog=4096).start()
    print("receiver: ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    with open(args.out, "w") as out:
        for row in seen:
            out.write(json.dumps(row) + "\n")
    await runner.cleanup()


if __name__ == "__main__":
    main()

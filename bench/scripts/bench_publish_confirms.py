#!/usr/bin/env python3
"""What RabbitMQ's publisher confirms cost the beat's publish, beside its floors, in one run.

    .venv/bin/python bench/scripts/bench_publish_confirms.py --messages 20000 --rounds 3

Publishes --messages run messages (one run each, as a beat does for jobs that do not batch)
to a queue of its own on --broker (the machine's RabbitMQ by default), deleted afterwards,
three ways in turn, --rounds times interleaved (this machine's timings drift):

- `publish_runs`, confirms on (CRONFLEET_RABBITMQ_CONFIRM_PUBLISH=true: one wait a queue's
  batch, dispatch/confirms.py);
- the floor: `publish_runs`, confirms off (the same code, nothing waited for);
- kombu's `confirm_publish` transport option: kombu's Producer.publish of the same bodies in
  a loop, a wait after every message (what turning confirms on in kombu would do).

Each way's messages are purged before the next. Prints messages/s per way and round, and the
median, and how many messages the queue held right after the call returned (without confirms
the broker may not have them all yet). The messages name runs that do not exist: nothing
consumes them. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOOR = "floor: publish_runs, confirms off"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()

    os.environ["CELERY_BROKER_URL"] = opts.broker  # Celery reads it from the environment first
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.test import override_settings
    from kombu import Connection, Producer

    from scheduler_app.dispatch.publish import MessageTemplates, RunMessage, publish_runs
    from scheduler_app.queues import task_queue

    queue = f"bench-confirms-{uuid.uuid4().hex[:8]}"
    messages = [RunMessage(run_id, 1, queue, 300) for run_id in range(1, opts.messages + 1)]
    templates = MessageTemplates()
    bodies = [templates.build(message) for message in messages]

    def product(confirm: bool):
        def publish() -> None:
            with override_settings(CRONFLEET_RABBITMQ_CONFIRM_PUBLISH=confirm):
                sent = publish_runs(list(messages))
            assert sent == len(messages), f"published {sent} of {len(messages)}"

        return publish

    def loop(**transport_options):
        def publish() -> None:
            with Connection(opts.broker, transport_options=transport_options) as conn:
                producer = Producer(conn.default_channel)
                for body, headers, properties in bodies:
                    producer.publish(
                        body,
                        exchange="",
                        routing_key=queue,
                        headers=headers,
                        serializer="json",
                        delivery_mode=2,
                        **properties,
                    )

        return publish

    ways = {
        "publish_runs, confirms on (one wait a batch)": product(True),
        FLOOR: product(False),
        "kombu confirm_publish (a wait a message)": loop(confirm_publish=True),
    }
    rates: dict[str, list[float]] = {name: [] for name in ways}
    with Connection(opts.broker) as admin:
        channel = admin.default_channel
        task_queue(queue)(channel).declare()
        try:
            for round_ in range(1, opts.rounds + 1):
                for name, publish in ways.items():
                    channel.queue_purge(queue)
                    started = time.perf_counter()
                    publish()
                    seconds = time.perf_counter() - started
                    count = channel.queue_declare(queue=queue, passive=True).message_count
                    rates[name].append(opts.messages / seconds)
                    print(
                        f"round {round_}: {name}: {opts.messages / seconds:,.0f} messages/s"
                        f" ({seconds:.2f} s, {count} in the queue after)",
                        flush=True,
                    )
        finally:
            channel.queue_delete(queue)
    print(f"\n{opts.messages:,} messages to {opts.broker.split('@')[-1]}, median of {opts.rounds} rounds:")
    floor = statistics.median(rates[FLOOR])
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"  {name}: {median:,.0f} messages/s ({median / floor:.0%} of the floor);"
            f" rounds {', '.join(f'{v:,.0f}' for v in values)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

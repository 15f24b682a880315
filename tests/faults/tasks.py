"""A target task for the fault suite: report the fire to the suite's HTTP receiver.

Loaded into the suite's workers with `celery worker --include tests.faults.tasks`; never
part of the product.
"""

import json
import time
import urllib.request

from celery import shared_task

from scheduler_app.fire import current_fire


@shared_task(name="faults.deliver")
def deliver(url: str, hold: float = 0.0) -> int:
    """Post the fire to `url`; with `hold`, spend that long around the post (half before,
    half after), so a fault can land in the middle of the target call."""
    fire = current_fire()
    time.sleep(hold / 2)
    body = json.dumps(
        {
            "fire_key": fire.fire_key,
            "attempt": fire.attempt,
            "scheduled_at": fire.scheduled_at.isoformat(),
            "run_id": fire.run_id,
            "job_id": fire.job_id,
        }
    ).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        status = response.status
    time.sleep(hold / 2)
    return status

"""A target task for the fault suite: report the fire to the suite's HTTP receiver.

Loaded into the suite's workers with `celery worker --include tests.faults.tasks`; never
part of the product.
"""

import json
import urllib.request

from celery import shared_task

from scheduler_app.fire import current_fire


@shared_task(name="faults.deliver")
def deliver(url: str) -> int:
    fire = current_fire()
    body = json.dumps({
        "fire_key": fire.fire_key, "attempt": fire.attempt, "scheduled_at": fire.scheduled_at.isoformat(),
        "run_id": fire.run_id, "job_id": fire.job_id,
    }).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status

"""What operators see of the fleet: Prometheus metrics (metrics.py) and the cluster's gauges
(cluster.py), the autoscaling forecast (forecast.py), the fleet objectives (objectives.py),
beats and workers as nodes with heartbeats (nodes.py), /healthz, /readyz and /metrics
(health.py), the dashboard's queries (dashboard.py), the JSON log format
(logformat.py), server errors logged and answered under an id (errors.py) and the fault
suite's failpoints (failpoints.py).

This face imports nothing: the worker's bootstep imports logformat before Django is set
up. Every room may call these modules; none of them calls the beat, the worker or the
services.
"""

__all__ = [
    "cluster",
    "dashboard",
    "errors",
    "failpoints",
    "forecast",
    "health",
    "logformat",
    "metrics",
    "nodes",
    "objectives",
]

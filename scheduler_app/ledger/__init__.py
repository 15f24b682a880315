"""The run ledger over time: its statistics (stats.py, with the lags defined once in
lags.py), the hourly rollup behind wide windows (rollup.py), the fleet objectives' events
(objectives.py), and retention: the policy of what is kept (policy.py) and the pruning that
enforces it (retention.py); and what the ends of a job's runs do to it: the pause after repeated failure (autopause.py), and the runs of
the jobs chained after it (chains.py).

The API, the commands, the dashboard, the alerts and the beats' upkeep call these modules.
"""

__all__ = ["autopause", "chains", "checkstatus", "lags", "objectives", "policy", "retention", "rollup", "stats"]

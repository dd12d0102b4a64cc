"""Alarms told to a webhook: when an ``alarms`` job raises new drift alarms, their JSON is POSTed to
``CALIBRATION_ALARM_WEBHOOK_URL`` (Slack-compatible, as its ``text``, plus the structured fields),
with a timeout; a webhook that fails is logged and recorded in the job's result, never retried
into a storm (the alarm stays listed at ``GET /v1/calibrators/{name}/alarms``)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

logger = logging.getLogger(__name__)
TIMEOUT_SECONDS = 5.0


def alarm_message(name: str, new_alarms: list[dict], monitors: list[dict]) -> dict:
    by_key = {(m["version"], m["signal"]): m for m in monitors}
    alarms = [{**alarm, **{k: by_key.get((alarm["version"], alarm["signal"]), {}).get(k)
                           for k in ("e_value", "alpha", "alarm_rows", "ece")}} for alarm in new_alarms]
    described = "; ".join(f"version {a['version']} ({a['signal']}, e-value {a['e_value']:.3g} ≥ 1/{a['alpha']:g})"
                          for a in alarms)
    return {"text": f"calibration drift alarm on {name}: {described}", "calibrator": name, "alarms": alarms}


def post_alarms(url: str, message: dict) -> str:
    """POST ``message`` as JSON; returns ``"sent"`` or what went wrong."""
    request = urllib.request.Request(url, data=json.dumps(message, default=str).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "calibration-service"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            return "sent" if 200 <= answer.status < 300 else f"answered {answer.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        logger.warning("alarm webhook %s failed: %s", url, exc)
        return f"failed: {exc}"

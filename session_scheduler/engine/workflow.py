"""The Temporal workflow of one session: one heartbeating activity, retried only when its worker
is lost (a heartbeat or start-to-close timeout), never for what the session itself ended with (a
usage limit, an outage, a failure: those come back as the result, for the scheduler to classify).

Imports nothing of the product: Temporal runs workflow code in its sandbox, replayed from history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

WORKFLOW = "SchedulerSession"
RUN_SESSION = "run_session"
NOT_RETRIED = "SessionRunnerError"
"""The error type of an activity whose runner raised (a bug, a request it cannot read): not retried."""


@workflow.defn(name=WORKFLOW)
class SessionWorkflow:
    @workflow.run
    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """`job`: the request (wire.py), the task queue, the timeouts and how many tries."""
        answer: dict[str, Any] = await workflow.execute_activity(
            RUN_SESSION,
            {"request": job["request"], "git": job["git"]},
            task_queue=job["task_queue"],
            start_to_close_timeout=timedelta(seconds=job["start_to_close_s"]),
            heartbeat_timeout=timedelta(seconds=job["heartbeat_timeout_s"]),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_attempts=job["tries"],
                non_retryable_error_types=[NOT_RETRIED],
            ),
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return answer
